"""Machine keys: `elk_<mode>_<prefix>_<secret>`, shown once, stored as prefix + SHA-256 digest.

The mode (`test` or `live`) is its agent's, and a key whose mode no longer matches its agent's is
refused. Keys issued before modes existed read `elk_<prefix>_<secret>`: they are live keys.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass

from django.db import connection
from django.db.models import QuerySet

from ledger.models import Agent, ApiKey, Mode
from ledger.policy import configversion, keyuse

PREFIX_LEN = 12
# The mode is absent from keys issued before modes existed.
_KEY_SHAPE = re.compile(r"elk_(?:(test|live)_)?([0-9a-f]{12})_[A-Za-z0-9_-]{20,100}")
_PREFIX = re.compile(r"(?:elk_)?(?:(?:test|live)_)?([0-9a-f]{12})")

# Every API call authenticates. A process trusts a key it has seen under the current
# configuration version without a query for this long after it last read the version; after
# that the next request reads its key and the version again, in one query. A revoked key, or
# a deactivated agent, is therefore refused by every process within this bound plus a
# request's duration, whichever process or statement made the change.
RECHECK_SECONDS = 0.2

_AGENT_FIELDS = ("id", "name", "is_active", "mode", "created_at")
# One row always (the version), with the key's agent when the key is live (neither revoked nor
# expired) and its agent active and in the key's mode; how long ago the key was last used
# (`ledger.policy.keyuse`), so that tracking it needs no query of its own; and how many seconds the
# key
# has left before it expires (NULL: no expiry), by the database clock. The remaining time, not
# the timestamp, is what a process keeps: its own monotonic clock counts it down, so a key
# expires in every process when the database says it does, whatever the hosts' clocks read.
_AUTHENTICATE = (
    f"SELECT {configversion.VERSION_SQL}, k.id, k.digest, "
    "EXTRACT(EPOCH FROM now() - k.last_used_at)::float8, "
    "EXTRACT(EPOCH FROM k.expires_at - now())::float8, "
    + ", ".join(f"a.{name}" for name in _AGENT_FIELDS)
    + f" FROM (SELECT 1) AS one LEFT JOIN ({ApiKey._meta.db_table} k"
    f" JOIN {Agent._meta.db_table} a ON a.id = k.agent_id AND a.is_active AND a.mode = %s)"
    " ON k.prefix = %s AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())"
)


@dataclass(frozen=True)
class _Known:
    key_id: int
    agent: Agent
    # time.monotonic() past which the key has expired; None for a key without an expiry.
    expires: float | None

    def expired(self) -> bool:
        return self.expires is not None and time.monotonic() >= self.expires


# digest → what its last successful read said
_known: configversion.VersionedCache[_Known] = configversion.VersionedCache()


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


# The reserved agent under which the ledger records its own decisions (halts, resumes):
# created by migration 0008, and no key is ever issued for it, so no caller can act as it.
SYSTEM_AGENT = "system"


def agent_for_key(key: str) -> Agent | None:
    """The active agent a live key belongs to, or None (no, malformed, wrong, revoked or expired
    key, or one whose mode is not its agent's)."""
    shape = _KEY_SHAPE.fullmatch(key)
    if shape is None:
        return None
    # The mode written in the key is authentic: the digest covers the whole key.
    mode, prefix = shape.group(1) or Mode.LIVE, shape.group(2)
    digest = key_digest(key)
    fresh = configversion.seen_within(RECHECK_SECONDS)
    known = _known.get(digest, fresh) if fresh is not None else None
    if known is not None and known.expired():
        # Expiry is part of a key's validity on every path: time passing does not move the
        # configuration version, so the cache must count it down itself.
        _known.evict(digest)
        return None
    if known is None:
        with connection.cursor() as cursor:
            cursor.execute(_AUTHENTICATE, [str(mode), prefix])
            version, key_id, stored, age, left, *agent_row = cursor.fetchone()
        configversion.observe(version)
        if stored is None or not hmac.compare_digest(stored, digest):
            # A refusal forgets the key, so no later request can pass on an older read.
            _known.evict(digest)
            return None
        keyuse.observe(key_id, age)
        expires = None if left is None else time.monotonic() + left
        agent = Agent.from_db(connection.alias, list(_AGENT_FIELDS), agent_row)
        known = _Known(key_id, agent, expires)
        _known.put(digest, version, known)
    keyuse.arm(known.key_id)
    return known.agent


def key_prefix(text: str) -> str | None:
    """The 12-character prefix that names a key, from `elk_live_1a2b…`, `elk_1a2b…` or itself."""
    match = _PREFIX.match(text)
    return match.group(1) if match else None


def keys_of(agent: Agent) -> QuerySet[ApiKey]:
    """The agent's keys, oldest first, for the key list (`manage.py listkeys`, the admin)."""
    return ApiKey.objects.filter(agent=agent).order_by("created_at", "id")
