"""Agents' keys issued, rotated and revoked: a control people set, and the first one used when
an agent misbehaves (revoking its key). A revoke moves the configuration version and writes the
witness (`ledger.audit.witness`). How a key is checked on every call is
`ledger.policy.agentkeys`."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Q
from django.db.models.functions import Now

from ledger.audit import witness
from ledger.models import Agent, ApiKey
from ledger.policy import configversion
from ledger.policy.agentkeys import PREFIX_LEN, SYSTEM_AGENT, key_digest


class ReservedAgent(ValueError):
    """A key was asked for the reserved system agent."""


def issue_key(agent: Agent, label: str = "") -> str:
    """Create a key for `agent` and return it; only its digest is kept."""
    if agent.name == SYSTEM_AGENT:
        raise ReservedAgent(f"No key can be issued for the reserved agent {SYSTEM_AGENT!r}.")
    prefix = secrets.token_hex(PREFIX_LEN // 2)
    key = f"elk_{agent.mode}_{prefix}_{secrets.token_urlsafe(32)}"
    ApiKey.objects.create(agent=agent, prefix=prefix, digest=key_digest(key), label=label)
    return key


def rotate(agent: Agent, *, expire_old_after: timedelta, label: str = "") -> tuple[str, int]:
    """Issue `agent` a new key; its other live keys expire `expire_old_after` from now (by the
    database clock), or earlier if they were to already. Returns (the new key, how many old keys
    were given that expiry)."""
    deadline = ExpressionWrapper(Now() + expire_old_after, output_field=DateTimeField())
    with transaction.atomic():
        expiring = (
            ApiKey.objects.filter(agent=agent, revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=deadline))
            .update(expires_at=deadline)
        )
        key = issue_key(agent, label=label)
    configversion.expire()  # an UPDATE sends no post_save; the trigger moved the version
    return key, expiring


def revoke(prefix: str) -> bool:
    revoked = ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).update(revoked_at=Now())
    configversion.expire()  # an UPDATE sends no post_save; the trigger moved the version
    if revoked:
        witness.controls_changed()
    return bool(revoked)
