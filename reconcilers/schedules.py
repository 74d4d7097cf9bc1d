"""django-q2 schedules: thin, set-based sweeps over the ledger, declared here and ensured
idempotently after every migrate (they show in the admin under "Scheduled tasks")."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection

from ledger.effects.states import CHECKED, Status, sql_list
from ledger.models import Effect
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


SCHEDULES = {
    "reconciliation-sweep": {
        "func": "reconcilers.schedules.sweep",
        "minutes": settings.LEDGER_SWEEP_MINUTES,
    },
    # One more lookup for effects retried on a proof of absence (reconcilers.tailcheck).
    "tail-checks": {
        "func": "reconcilers.tailcheck.run_due",
        "minutes": settings.LEDGER_SWEEP_MINUTES,
    },
    "escalation": {
        "func": "reviews.alerts.escalation.escalate",
        "minutes": settings.LEDGER_SWEEP_MINUTES,
    },
    # Bulk decisions whose job Redis lost are driven again from their rows (reviews.queue.bulk).
    "bulk-jobs": {
        "func": "reviews.queue.bulk.redrive_lost",
        "minutes": 1,
    },
    "review-alerts": {
        "func": "reviews.alerts.due.sweep",
        "minutes": settings.LEDGER_SWEEP_MINUTES,
    },
    # Every minute whatever the sweep period: halts and limit breaches are enqueued at once.
    "alert-sender": {
        "func": "reviews.alerts.sender.send_due",
        "minutes": 1,
    },
    # The witness outside the database (ledger.restore): compared, then rewritten; a database
    # found behind it enters restore mode, which ends once what it put in doubt is settled.
    "restore-witness": {
        "func": "ledger.restore.mode.watch",
        "minutes": 1,
    },
    # While restore mode is on: the providers' records of the lost window, each matched to an
    # effect or raised as an incident (reconcilers.gapsweep).
    "restore-gap-sweep": {
        "func": "reconcilers.gapsweep.run",
        "minutes": 1,
    },
    # A request sent twice in one run under two keys (ledger.containment.repeated).
    "repeated-requests": {
        "func": "ledger.containment.repeated.flag_recent",
        "minutes": 1,
    },
    "seal-events": {
        "func": "ledger.audit.seal.seal_all",
        "minutes": 1,
    },
    # The effect counts' deltas folded into their rows (ledger.observability.effectcounts): the
    # summary folds before it reads, this keeps the deltas few when nobody scrapes.
    "fold-effect-counts": {
        "func": "ledger.observability.effectcounts.fold",
        "minutes": 1,
    },
    "export-chain-head": {
        "func": "ledger.audit.seal.export_head",
        "minutes": 60,
    },
    # The events table's partitions for this month and the next three (ledger.audit.partitions):
    # daily, so a missed run or two still leaves months in hand.
    "event-partitions": {
        "func": "ledger.audit.partitions.ensure_ahead",
        "minutes": 1440,
    },
    # Payloads of effects resolved longer ago than their tool's retention (ledger.audit.retention).
    "retention": {
        "func": "ledger.audit.retention.redact_expired",
        "minutes": 60,
    },
    # Yesterday's statement for each tool that fetches them; a day already imported is
    # skipped, so running hourly is a daily import that retries a provider that was down.
    "fetch-statements": {
        "func": "reconcilers.statement_fetch.fetch_due_statements",
        "minutes": 60,
    },
}


def ensure_schedules() -> None:
    """Create or update the schedules declared above (catch_up is off cluster-wide) and
    remove schedules this module no longer declares."""
    from django_q.models import Schedule

    # The old module paths too (`ledger.seal`, `ledger.retention`, before the ledger's
    # subpackages; `reviews.alerts.sweep`, `reviews.bulk`, `reviews.escalation`, before the
    # reviews app's, all under "reviews."): a schedule stored under one is ours, and is
    # rewritten by name below.
    ours = (
        "reconcilers.",
        "reviews.",
        "ledger.audit.",
        "ledger.containment.",
        "ledger.restore.",
        "ledger.observability.",
        "ledger.seal.",
        "ledger.retention.",
    )
    for prefix in ours:
        Schedule.objects.filter(func__startswith=prefix).exclude(name__in=SCHEDULES).delete()
    for name, spec in SCHEDULES.items():
        Schedule.objects.update_or_create(
            name=name,
            defaults={
                "func": spec["func"],
                "schedule_type": Schedule.MINUTES,
                "minutes": spec["minutes"],
                "repeats": -1,
            },
        )
