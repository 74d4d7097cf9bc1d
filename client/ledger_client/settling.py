"""Waiting for the ledger to settle an effect in doubt, so that a resumed run finishes its own
work with nothing but the framework's own resume.

A guarded call met again after a crash finds its effect in doubt: `dispatching` under the dead
process's lease, `unknown`, or `awaiting_confirmation`. The guard then waits here, bounded by
its `settle_timeout`:
- while the lease runs, on the ledger's long poll (a live worker may still report; a dead one's
  lease simply ends, and `lost_leases` gives its attempt back, ledger/sql/lost_leases.sql),
  unless the lease is this host's dead predecessor's (`ledger_client.holders`): that one it
  ends at once (`end_lease`);
- once it is lost, asking `recover(run_id)` every `NUDGE` seconds, which lets the ledger move
  it on at once (back to `planned` where a resend is safe, or to a lookup at the provider)
  rather than at its next sweep, and waiting on the long poll in between.
It stops as soon as the effect is settled (`confirmed`: the guard returns the recorded result;
`planned`: proven not done or safe to resend, the guard runs it now under the same effect;
`failed`, `cancelled`, `compensated`: the guard says so), or as soon as the ledger's plan for it
is `review` (an operator decides: waiting longer would not help), or at the deadline.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime

from ledger_client.aio import AsyncLedger
from ledger_client.errors import LedgerRequestError, NeedsReview
from ledger_client.holders import holder_gone
from ledger_client.models import EffectRecord, RecoveryPlan
from ledger_client.sync import Ledger

# The statuses in which an effect may have been done or not: the ones worth waiting out.
IN_DOUBT = frozenset({"dispatching", "unknown", "awaiting_confirmation"})
# Seconds between two `recover()` calls once the effect's lease is lost.
NUDGE = 5.0


def _lease_left(record: EffectRecord) -> float:
    """Seconds until the lease of a `dispatching` effect ends (0 when it has, or has none)."""
    if record.status != "dispatching" or record.lease_expires_at is None:
        return 0.0
    expires = record.lease_expires_at
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    return max(0.0, (expires - datetime.now(UTC)).total_seconds())


def for_review(plan: RecoveryPlan, effect_id: str) -> bool:
    """Is the ledger's plan for `effect_id` a review (an operator decides it)?"""
    return any(item.effect.id == effect_id and item.action == "review" for item in plan)


def _next_wait(record: EffectRecord, left: float) -> float:
    lease = _lease_left(record)
    return min(left, lease + 1.0 if lease > 0 else NUDGE)


def _gone_holder(record: EffectRecord) -> str | None:
    """The owner of the live lease `record` shows, when that process is certainly gone
    (`ledger_client.holders`): its lease need not be waited out."""
    if _lease_left(record) > 0 and holder_gone(record.lease_owner):
        return record.lease_owner
    return None


def settled(ledger: Ledger, hold: NeedsReview, run_id: str, deadline: float) -> bool:
    """Wait until `deadline` (a `time.monotonic()` value) for the effect `hold` names to leave
    doubt. True: ask for it again (it is settled); False: it names no effect, an operator must
    decide, or time is up."""
    record = hold.effect
    while record is not None and record.status in IN_DOUBT:
        left = deadline - time.monotonic()
        if left < 1:
            return False
        if owner := _gone_holder(record):
            with contextlib.suppress(LedgerRequestError):  # moved first, or an older ledger
                record = ledger.end_lease(record.id, owner)
        if _lease_left(record) == 0 and for_review(ledger.recover(run_id), record.id):
            return False
        record = ledger.wait_for_change(
            record.id, status=record.status, timeout=_next_wait(record, left)
        )
    return record is not None


async def asettled(ledger: AsyncLedger, hold: NeedsReview, run_id: str, deadline: float) -> bool:
    """`settled`, awaited."""
    record = hold.effect
    while record is not None and record.status in IN_DOUBT:
        left = deadline - time.monotonic()
        if left < 1:
            return False
        if owner := _gone_holder(record):
            with contextlib.suppress(LedgerRequestError):  # moved first, or an older ledger
                record = await ledger.end_lease(record.id, owner)
        if _lease_left(record) == 0 and for_review(await ledger.recover(run_id), record.id):
            return False
        record = await ledger.wait_for_change(
            record.id, status=record.status, timeout=_next_wait(record, left)
        )
    return record is not None
