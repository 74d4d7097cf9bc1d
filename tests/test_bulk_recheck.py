"""A background bulk job decides as its creator only while the creator may: it reads them again
before every item, and stops once they are deactivated or no longer hold a role that may
decide. Real PostgreSQL, real Redis, a real rq worker."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import django_rq
import pytest
import rq
from django.contrib.auth.models import Group
from django.db import connection

from ledger.models import Effect
from ledger.models.states import Kind
from ledger.policy.roles import AUDITOR, OPERATOR, grant
from reconcilers.worker import LedgerWorker
from reviews.models import BulkJob
from reviews.queue.bulk import INLINE_LIMIT
from tests.factories import in_review, signed_in

ITEMS = INLINE_LIMIT + 10


@pytest.fixture
def queue():
    """The project's rq queue (on this run's Redis database), empty before and after."""
    q = django_rq.get_queue("default")
    q.empty()
    yield q
    q.empty()


def _start_job(olga, make_effect) -> tuple[BulkJob, list[Effect]]:
    effects = [make_effect("planned") for _ in range(ITEMS)]
    items = [in_review(e) for e in effects]
    form = {"items": [str(i.pk) for i in items], "confirmed": "1"}
    response = signed_in(olga).post(
        "/queue/bulk", {**form, "action": "cancel", "reason": "Run abandoned"}
    )
    assert response.status_code == 302
    return BulkJob.objects.get(), effects


def _work(queue: rq.Queue) -> None:
    LedgerWorker([queue], connection=queue.connection).work(burst=True)
    assert queue.count == 0 and queue.failed_job_registry.count == 0


class Demotion(threading.Thread):
    """From a connection of its own, while the job runs: once it has recorded `after` items,
    olga stops being an operator (an auditor now). Notes the database time it committed."""

    def __init__(self, user, job: BulkJob, after: int) -> None:
        super().__init__(daemon=True)
        self.user, self.job, self.after = user, job, after
        self.at: datetime | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 30
            while len(BulkJob.objects.get(pk=self.job.pk).results) < self.after:
                assert time.monotonic() < deadline
                time.sleep(0.002)
            self.user.groups.remove(Group.objects.get(name=OPERATOR))
            grant(self.user, AUDITOR)
            with connection.cursor() as cursor:
                cursor.execute("SELECT clock_timestamp()")
                self.at = cursor.fetchone()[0]
        finally:
            connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_creator_loses_the_operator_role_mid_run_stops_deciding(
    olga, make_effect, queue
):
    job, effects = _start_job(olga, make_effect)
    demotion = Demotion(olga, job, after=3)
    demotion.start()

    _work(queue)
    demotion.join(10)

    assert demotion.at is not None, "the job ended before the demotion"
    job.refresh_from_db()
    why = "Stopped: olga no longer holds a role that may decide"
    assert job.state == "failed" and job.error.startswith(why)
    assert len(job.results) == ITEMS  # every item reached: decided before, skipped after
    done = [r["done"] for r in job.results]
    decided = done.index(False)
    assert 3 <= decided < ITEMS and not any(done[decided:])
    assert {r["why"] for r in job.results[decided:]} == {why}
    cancelled = Effect.objects.filter(pk__in=[e.pk for e in effects], status="cancelled")
    assert cancelled.count() == decided
    # At most the item in flight when the role went was decided after it; nothing later.
    late = Effect.objects.filter(kind=Kind.DECISION, created_at__gt=demotion.at)
    assert late.count() <= 1

    page = signed_in(olga).get(f"/queue/bulk/{job.pk}").content.decode()  # an auditor now
    assert "Failed:" in page and why in page
    assert f"{decided} done, {ITEMS - decided} skipped" in page


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_creator_was_deactivated_decides_nothing(olga, make_effect, queue):
    job, effects = _start_job(olga, make_effect)
    olga.is_active = False
    olga.save(update_fields=["is_active"])

    _work(queue)

    job.refresh_from_db()
    why = "Stopped: olga is no longer active"
    assert job.state == "failed" and job.error.startswith(why)
    assert [(r["done"], r["why"]) for r in job.results] == [(False, why)] * ITEMS
    assert not Effect.objects.filter(pk__in=[e.pk for e in effects], status="cancelled").exists()
    assert not Effect.objects.filter(kind=Kind.DECISION).exists()
