"""rq jobs: idempotent wake-ups. Each only asks the reconciler to check effects that the ledger
says are due; running one twice, or late, does no harm."""

from __future__ import annotations

from collections.abc import Iterable

from reconcilers.jobqueue import fresh_connection
from reconcilers.reconcile import process_many, process_next

# Effects taken and checked together: one UPDATE to take them, their lookups side by side.
BATCH = 50


def check_effects(effect_ids: Iterable[str]) -> int:
    """Check each named effect that is still due. Returns how many this job checked."""
    fresh_connection()
    ids = list(effect_ids)
    return sum(process_many(ids[start : start + BATCH]) for start in range(0, len(ids), BATCH))


def drain(limit: int = 500) -> int:
    """Check up to `limit` due effects, most overdue first (a batched job)."""
    fresh_connection()
    done = 0
    while done < limit and process_next():
        done += 1
    return done
