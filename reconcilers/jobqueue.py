"""The rq queue that carries wake-ups for the reconciliation and execution workers.

A job is only a hint: the ledger is the queue of record, and the sweep re-enqueues whatever
Redis lost. So a Redis outage is logged and never fails the request whose write already
committed.
"""

from __future__ import annotations

import logging
from typing import Any

import django_rq
from django.db import close_old_connections, connection
from redis import RedisError

from config import tasks

log = logging.getLogger(__name__)

QUEUE = "default"
JOB_TIMEOUT = 600
# How long Redis keeps a job once it has run. Nobody reads a job's result (the ledger records
# what a job did), so a finished job is deleted at once (rq's default kept each for 500 s: at
# a few hundred wake-ups a second, hundreds of thousands of keys). A failed job is kept a day
# in the failed-job registry, for a person (or `make drills`) to read why; its effects are
# re-driven by the sweep meanwhile.
RESULT_TTL = 0
FAILURE_TTL = 24 * 3600


def fresh_connection() -> None:
    """What every rq job does first. The worker is long-lived and non-forking, and its database
    connection may have been cut by a database restart without Django knowing:
    `close_old_connections` tests only a connection that has already failed, so the first job
    after a restart would fail and its wake-up wait for the sweep (`manage.py faultdrill
    postgres` shows it). One round trip per job, not per effect, settles it."""
    close_old_connections()
    if connection.connection is not None and not connection.is_usable():
        connection.close()


def enqueue(task: str, calls: list[tuple[Any, ...]]) -> bool:
    """Enqueue the task registered as `task` (`config.tasks`) once per argument tuple; False
    when Redis could not take them all. The job stores the dispatcher and the task's name, so
    a job queued before a module moved still runs. A name nobody registered is a mistake in
    the caller: it raises here (`UnknownTask`) and nothing is queued."""
    tasks.REGISTRY.lookup(task)
    try:
        queue = django_rq.get_queue(QUEUE)
        for args in calls:
            queue.enqueue(
                tasks.DISPATCHER,
                task,
                *args,
                job_timeout=JOB_TIMEOUT,
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
            )
    except (RedisError, OSError) as exc:
        log.warning("could not enqueue %s (%s); the sweep will re-drive it", task, exc)
        return False
    return True


def enqueue_now(effect_ids: list[str]) -> bool:
    """Enqueue one job checking these effects; False when Redis could not take it."""
    return enqueue("check-effects", [(effect_ids,)])


def on_checks_due(sender: Any, effect_ids: list[str], **kwargs: Any) -> None:
    """The receiver of `ledger.effects.wakeups.checks_due` (connected in
    `ReconcilersConfig.ready`)."""
    enqueue_now(effect_ids)
