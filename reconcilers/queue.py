"""Wake-ups for the reconciliation worker, sent through Redis after the ledger write commits.

A wake-up is only a hint: the ledger (`next_check_at`) is the queue of record, and the sweep
re-enqueues whatever Redis lost. So a Redis outage is logged and never fails the request whose
write already committed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import django_rq
from django.db import transaction
from redis import RedisError

log = logging.getLogger(__name__)

QUEUE = "default"
JOB_TIMEOUT = 600


def enqueue_now(effect_ids: list[str]) -> bool:
    """Enqueue one job checking these effects; False when Redis could not take it."""
    try:
        django_rq.get_queue(QUEUE).enqueue(
            "reconcilers.jobs.check_effects", effect_ids, job_timeout=JOB_TIMEOUT
        )
    except (RedisError, OSError) as exc:
        log.warning(
            "could not enqueue %d checks (%s); the sweep will re-drive them", len(effect_ids), exc
        )
        return False
    return True


def wake(effect_ids: Iterable[Any]) -> None:
    """After the current transaction commits, ask a worker to check these effects."""
    ids = [str(i) for i in effect_ids]
    if ids:
        transaction.on_commit(lambda: enqueue_now(ids), robust=True)
