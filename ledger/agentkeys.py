"""Machine keys: `elk_<prefix>_<secret>`, shown once, stored as prefix + SHA-256 digest."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from django.db import connection
from django.db.models.functions import Now

from ledger import configversion
from ledger.models import Agent, ApiKey

_PREFIX_LEN = 12
_KEY_SHAPE = re.compile(r"elk_[0-9a-f]{12}_[A-Za-z0-9_-]{20,100}")

# Every API call authenticates. A process trusts a key it has seen under the current
# configuration version without a query for this long after it last read the version; after
# that the next request reads its key and the version again, in one query. A revoked key, or
# a deactivated agent, is therefore refused by every process within this bound plus a
# request's duration, whichever process or statement made the change.
RECHECK_SECONDS = 0.2

_AGENT_FIELDS = ("id", "name", "is_active", "created_at")
# One row always (the version), with the key's agent when the key is live and its agent active.
_AUTHENTICATE = (
    f"SELECT {configversion.VERSION_SQL}, k.digest, "
    + ", ".join(f"a.{name}" for name in _AGENT_FIELDS)
    + f" FROM (SELECT 1) AS one LEFT JOIN ({ApiKey._meta.db_table} k"
    f" JOIN {Agent._meta.db_table} a ON a.id = k.agent_id AND a.is_active)"
    " ON k.prefix = %s AND k.revoked_at IS NULL"
)

_known: configversion.VersionedCache[Agent] = configversion.VersionedCache()


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def issue_key(agent: Agent, label: str = "") -> str:
    """Create a key for `agent` and return it; only its digest is kept."""
    prefix = secrets.token_hex(_PREFIX_LEN // 2)
    key = f"elk_{prefix}_{secrets.token_urlsafe(32)}"
    ApiKey.objects.create(agent=agent, prefix=prefix, digest=_digest(key), label=label)
    return key


def agent_for_key(key: str) -> Agent | None:
    """The active agent a live key belongs to, or None (no, malformed, wrong or revoked key)."""
    if not _KEY_SHAPE.fullmatch(key):
        return None
    digest = _digest(key)
    fresh = configversion.seen_within(RECHECK_SECONDS)
    if fresh is not None and (agent := _known.get(digest, fresh)) is not None:
        return agent
    with connection.cursor() as cursor:
        cursor.execute(_AUTHENTICATE, [key[4 : 4 + _PREFIX_LEN]])
        version, stored, *agent_row = cursor.fetchone()
    configversion.observe(version)
    if stored is None or not hmac.compare_digest(stored, digest):
        return None
    agent = Agent.from_db(connection.alias, list(_AGENT_FIELDS), agent_row)
    _known.put(digest, version, agent)
    return agent


def revoke(prefix: str) -> bool:
    revoked = ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).update(revoked_at=Now())
    configversion.expire()  # an UPDATE sends no post_save; the trigger moved the version
    return bool(revoked)
