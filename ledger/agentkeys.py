"""Machine keys: `elk_<prefix>_<secret>`, shown once, stored as prefix + SHA-256 digest."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from django.db.models.functions import Now

from ledger.models import Agent, ApiKey

_PREFIX_LEN = 12
_KEY_SHAPE = re.compile(r"elk_[0-9a-f]{12}_[A-Za-z0-9_-]{20,100}")


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
    if (
        not key.startswith("elk_")
        or len(key) > 200
        or key[4 + _PREFIX_LEN : 5 + _PREFIX_LEN] != "_"
    ):
        return None
    prefix = key[4 : 4 + _PREFIX_LEN]
    row = (
        ApiKey.objects.select_related("agent")
        .filter(prefix=prefix, revoked_at__isnull=True, agent__is_active=True)
        .first()
    )
    if row is None or not hmac.compare_digest(row.digest, _digest(key)):
        return None
    return row.agent


def revoke(prefix: str) -> bool:
    return bool(
        ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).update(revoked_at=Now())
    )
