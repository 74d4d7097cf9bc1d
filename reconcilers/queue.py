"""The rq queue that carries wake-ups for the reconciliation and execution workers.

A job is only a hint: the ledger is the queue of record, and the sweep re-enqueues whatever
Redis lost. So a Redis outage is logged and never fails the request whose write already
committed.
"""

from __future__ import annotations

import logging
from typing import Any

import django_rq
from redis import RedisError

log = logging.getLogger(__name__)

QUEUE = "default"
JOB_TIMEOUT = 600


def enqueue(job: str, calls: list[tuple[Any, ...]]) -> bool:
    """Enqueue `job` once per argument tuple; False when Redis could not take them all."""
    try:
        queue = django_rq.get_queue(QUEUE)
        for args in calls:
            queue.enqueue(job, *args, job_timeout=JOB_TIMEOUT)
    except (RedisError, OSError) as exc:
        log.warning("could not enqueue %s (%s); the sweep will re-drive it", job, exc)
        return False
    return True


def enqueue_now(effect_ids: list[str]) -> bool:
    """Enqueue one job checking these effects; False when Redis could not take it."""
    return enqueue("reconcilers.jobs.check_effects", [(effect_ids,)])


def on_checks_due(sender: Any, effect_ids: list[str], **kwargs: Any) -> None:
    """The receiver of `ledger.wakeups.checks_due` (connected in `ReconcilersConfig.ready`)."""
    enqueue_now(effect_ids)
