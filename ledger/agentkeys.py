"""Machine keys: `elk_<prefix>_<secret>`, shown once, stored as prefix + SHA-256 digest."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time

from django.conf import settings
from django.db.models.functions import Now
from django.db.models.signals import post_delete, post_save

from ledger.models import Agent, ApiKey

_PREFIX_LEN = 12
_KEY_SHAPE = re.compile(r"elk_[0-9a-f]{12}_[A-Za-z0-9_-]{20,100}")

# Every API call authenticates: each process remembers good keys for a few seconds. Revoking a
# key or deactivating an agent through the ORM clears this process's memory at once; other
# processes refuse the key within LEDGER_KEY_CACHE_SECONDS.
_known: dict[str, tuple[float, Agent]] = {}


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def forget_keys(**kwargs: object) -> None:
    _known.clear()


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
    hit = _known.get(digest)
    if hit and hit[0] > time.monotonic():
        return hit[1]
    row = (
        ApiKey.objects.select_related("agent")
        .filter(prefix=key[4 : 4 + _PREFIX_LEN], revoked_at__isnull=True, agent__is_active=True)
        .first()
    )
    if row is None or not hmac.compare_digest(row.digest, digest):
        return None
    _known[digest] = (time.monotonic() + settings.LEDGER_KEY_CACHE_SECONDS, row.agent)
    return row.agent


def revoke(prefix: str) -> bool:
    revoked = ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).update(revoked_at=Now())
    forget_keys()
    return bool(revoked)


for _model in (ApiKey, Agent):
    post_save.connect(forget_keys, sender=_model)
    post_delete.connect(forget_keys, sender=_model)
