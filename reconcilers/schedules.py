"""django-q2 schedules: thin, set-based sweeps over the ledger, each declared here by its task's
name and period and ensured idempotently after every migrate (they show in the admin under
"Scheduled tasks"); the reconciliation sweep itself."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core import checks
from django.db import connection

from config import tasks
from ledger.models import Effect
from ledger.models.states import CHECKED, Status, sql_list
from reconcilers.execution import redrive_executions
from reconcilers.jobqueue import enqueue_now

log = logging.getLogger(__name__)

_TABLE = Effect._meta.db_table
# Due checks are re-enqueued in jobs of this many ids.
BATCH = 200
REDRIVE_LIMIT = 20_000


def queue_expired_leases() -> int:
    """Dispatching effects whose lease ran out enter reconciliation, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_TABLE} SET next_check_at = lease_expires_at "
            f"WHERE status = '{Status.DISPATCHING.value}' AND lease_expires_at <= now() "
            f"AND next_check_at IS NULL"
        )
        return cursor.rowcount


def redrive_due() -> int:
    """Enqueue wake-ups for every due check: whatever Redis lost is driven again from the
    ledger. A job for an effect that another worker already took does nothing."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {_TABLE} "
            f"WHERE status IN ({sql_list(CHECKED)}) "
            f"AND next_check_at <= now() ORDER BY next_check_at LIMIT %s",
            [REDRIVE_LIMIT],
        )
        ids = [str(row[0]) for row in cursor.fetchall()]
    for start in range(0, len(ids), BATCH):
        if not enqueue_now(ids[start : start + BATCH]):
            break
    return len(ids)


def sweep() -> dict[str, int]:
    """Expired leases into reconciliation, then wake-ups for everything due, and for the
    compensations the ledger sends itself that are still waiting to be sent."""
    result = {
        "expired_leases": queue_expired_leases(),
        "redriven": redrive_due(),
        "executions": redrive_executions(),
    }
    log.info("reconciliation sweep: %s", result)
    return result


# Each schedule by its task's name (registered in an app's `tasks.py`, `config.tasks`) and its
# period in minutes. Nothing else is stored: the row names the dispatcher and this name.
SCHEDULES: dict[str, int] = {
    "reconciliation-sweep": settings.LEDGER_SWEEP_MINUTES,
    "tail-checks": settings.LEDGER_SWEEP_MINUTES,
    "escalation": settings.LEDGER_SWEEP_MINUTES,
    # Bulk decisions whose job Redis lost, driven again from their rows.
    "bulk-jobs": 1,
    "review-alerts": settings.LEDGER_SWEEP_MINUTES,
    # Every minute whatever the sweep period: halts and limit breaches are enqueued at once.
    "alert-sender": 1,
    "restore-witness": 1,
    "restore-gap-sweep": 1,
    "repeated-requests": 1,
    "seal-events": 1,
    "fold-effect-counts": 1,
    "statement-held-lines": 1,
    "export-chain-head": 60,
    # Daily: a missed run or two still leaves months in hand (four are made ahead).
    "event-partitions": 1440,
    "retention": 60,
    # A day already imported is skipped, so hourly is a daily import that retries a provider
    # that was down.
    "fetch-statements": 60,
}


def ensure_schedules() -> None:
    """Make the stored schedules agree with SCHEDULES (catch_up is off cluster-wide), however
    often it runs. Each row names the dispatcher and its task's name; a row stored by an earlier
    release, which named a function's dotted path, is rewritten by its name. A dispatcher's row
    whose name is no longer declared is removed; a row naming any other function is someone
    else's and stays."""
    from django_q.models import Schedule

    Schedule.objects.filter(func=tasks.DISPATCHER).exclude(name__in=SCHEDULES).delete()
    for name, minutes in SCHEDULES.items():
        Schedule.objects.update_or_create(
            name=name,
            defaults={
                "func": tasks.DISPATCHER,
                "args": repr(name),
                "schedule_type": Schedule.MINUTES,
                "minutes": minutes,
                "repeats": -1,
            },
        )


def tasks_are_registered(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A system check, so every management command that starts a process (the rq worker, the
    django-q2 cluster, migrate) runs it first: the apps' tasks are found, none registered twice,
    and each schedule names one of them."""
    try:
        known = tasks.REGISTRY.tasks()
    except tasks.DuplicateTask as exc:
        return [checks.Error(str(exc), id="reconcilers.E001")]
    return [
        checks.Error(
            f"The schedule {name!r} names no registered task.",
            hint="Register it in an app's tasks.py (config.tasks.register).",
            id="reconcilers.E002",
        )
        for name in SCHEDULES
        if name not in known
    ]
