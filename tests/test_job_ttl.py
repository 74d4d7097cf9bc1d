"""How long Redis keeps an rq job once it has run (`reconcilers.jobqueue`): a finished job not
at all, a failed one a day. Against the real Redis, with a real worker."""

from __future__ import annotations

import rq

from reconcilers.jobqueue import FAILURE_TTL, enqueue
from reconcilers.worker import LedgerWorker


def _enqueued(queue: rq.Queue, task: str, calls: list[tuple], capture) -> list[str]:
    """Enqueue as the ledger does; django-rq pushes the jobs when the transaction commits."""
    before = set(queue.job_ids)
    with capture(execute=True):
        assert enqueue(task, calls)
    return [job_id for job_id in queue.job_ids if job_id not in before]


def test_a_finished_job_leaves_nothing_in_redis(db, rq_queue, django_capture_on_commit_callbacks):
    (job_id,) = _enqueued(rq_queue, "check-effects", [([],)], django_capture_on_commit_callbacks)
    key = rq.job.Job.key_for(job_id)
    assert rq_queue.connection.exists(key)

    LedgerWorker([rq_queue], connection=rq_queue.connection).work(burst=True)

    assert not rq_queue.connection.exists(key)
    assert job_id not in rq_queue.finished_job_registry.get_job_ids()
    assert not rq_queue.connection.keys(f"rq:results:{job_id}*")


def test_a_failed_job_is_kept_a_day_for_a_person_to_read(
    db, rq_queue, django_capture_on_commit_callbacks
):
    calls = [("not", "arguments")]
    (job_id,) = _enqueued(rq_queue, "check-effects", calls, django_capture_on_commit_callbacks)

    LedgerWorker([rq_queue], connection=rq_queue.connection).work(burst=True)

    registry = rq_queue.failed_job_registry
    try:
        assert job_id in registry.get_job_ids()
        ttl = rq_queue.connection.ttl(rq.job.Job.key_for(job_id))
        # Within an hour of a day (a busy machine may be slow to ask): not rq's year, nor 500 s.
        assert FAILURE_TTL - 3600 < ttl <= FAILURE_TTL
    finally:
        # Other tests' workers must find no failed job (`work`): this one is not theirs.
        registry.remove(job_id, delete_job=True)
