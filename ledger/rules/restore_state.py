"""Whether restore mode is on, as every request may ask: read once per configuration version.

Opening or ending a restore window moves the configuration version (a trigger on the windows'
table, as on tools and keys), which the agent API reads with each key, so a process learns of it
within `agentkeys.RECHECK_SECONDS` without a query of its own per request.

`starts_in_doubt` is the rule for new intents while the mode is on: the ledger cannot tell an
intent posted again for an effect it lost from a new one, so an intent whose tool cannot
deduplicate it starts `unknown`, not `planned`. A tool that honours idempotency keys can, while
the key is within the provider's memory of it (`key_ttl`, counted from `lost_since`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from ledger.models import RestoreWindow
from ledger.policy import configversion


def longest_lease() -> timedelta:
    """The longest lease an agent can take (the API's bound on lease_seconds,
    `LEDGER_MAX_LEASE_SECONDS`): an effect claimed that long before the loss may have reported
    its outcome inside the lost window, so the window reaches back this far; and a lease taken
    on the lost branch may have been used to send for that long after the mode began."""
    return timedelta(seconds=settings.LEDGER_MAX_LEASE_SECONDS)


_cache: configversion.VersionedCache[tuple[datetime | None]] = configversion.VersionedCache()


def lost_since() -> datetime | None:
    """The open window's `lost_since`, or None when restore mode is off."""
    version = configversion.current()
    cached = _cache.get("open", version)
    if cached is None:
        found = (
            RestoreWindow.objects.filter(ended_at__isnull=True)
            .values_list("lost_since", flat=True)
            .first()
        )
        cached = (found,)
        _cache.put("open", version, cached)
    return cached[0]


def keys_cover(policy: Any, since: datetime) -> bool:
    """Whether the provider deduplicates by this tool's keys across the lost window."""
    if not policy.honours_key:
        return False
    return policy.key_ttl is None or timezone.now() - since <= policy.key_ttl


def starts_in_doubt(policy: Any) -> bool:
    """Whether a new action intent for `policy`'s tool starts `unknown` (restore mode). A
    read-only tool's never does: doing it twice changes nothing."""
    if policy.read_only:
        return False
    since = lost_since()
    return since is not None and not keys_cover(policy, since)
