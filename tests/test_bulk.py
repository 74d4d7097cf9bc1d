"""Bulk actions on the review queue: a confirmation step, then each item its own audited decision
(or assignment) in its own transaction, skipped with a reason where it does not apply; more
than 100 items as a background job on the real rq queue, with a progress page, and a lost job
marked failed rather than left running."""

from __future__ import annotations

import django_rq
import pytest
import rq
from django.db import connection

from config.tasks import DISPATCHER
from ledger.models import Effect, Reason, ReviewItem
from ledger.models.states import Kind
from ledger.rules.reviewqueue import open_review
from reconcilers.worker import LedgerWorker
from reviews.models import BulkJob
from reviews.queue.bulk import INLINE_LIMIT, REDRIVES, redrive_lost, run_job
from reviews.queue.holds import hold_item
from tests.factories import in_review, lookup_found, signed_in


def ask(client, items, **form):
    """Post the bulk form, confirmed unless told otherwise."""
    data = {"items": [str(i.pk) for i in items], "confirmed": "1", **form}
    return client.post("/queue/bulk", data)


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind=Kind.DECISION))


# --- The confirmation step -------------------------------------------------------------------


def test_the_first_post_asks_to_confirm_how_many_and_which_decision(olga, make_effect):
    items = [in_review(make_effect("planned")) for _ in range(3)]
    response = ask(signed_in(olga), items, action="cancel", reason="Stale", confirmed="")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Cancel: 3 items?" in html
    assert html.count('name="items"') == 3 and 'name="confirmed" value="1"' in html
    assert not ReviewItem.objects.filter(resolved_at__isnull=False).exists()


# --- In the request --------------------------------------------------------------------------


def test_bulk_assign_hands_every_selected_item_to_the_operator(olga, otto, make_effect):
    items = [in_review(make_effect("unknown", attempt=1)) for _ in range(3)]
    response = ask(signed_in(olga), items[:2], action="assign", assignee=str(otto.pk))
    assert response.status_code == 200
    assert "Assign to otto" in response.content.decode()
    assert [ReviewItem.objects.get(pk=i.pk).assignee for i in items] == [otto, otto, None]


def test_each_item_becomes_its_own_audited_decision(olga, make_effect):
    effects = [make_effect("unknown", attempt=1) for _ in range(3)]
    items = [in_review(e) for e in effects]
    response = ask(
        signed_in(olga), items, action="fail", reason="Declined", evidence="Support ticket 7"
    )
    html = response.content.decode()
    assert response.status_code == 200 and "<strong>3 done</strong>" in html
    decision_ids = set()
    for effect, item in zip(effects, items, strict=True):
        effect.refresh_from_db()
        item.refresh_from_db()
        [decision] = decisions_on(effect)
        assert effect.status == "failed"
        assert item.resolved_by == olga and item.decision_id == decision.id
        assert f'href="/effects/{effect.id}/"' in html
        decision_ids.add(decision.id)
    assert len(decision_ids) == 3


def test_items_that_cannot_take_the_decision_are_skipped_with_the_reason(olga, make_effect):
    unknown = in_review(make_effect("unknown", attempt=1))
    planned = in_review(make_effect("planned"))
    approval = make_effect("awaiting_approval")
    open_review(approval.id, Reason.APPROVAL_REQUIRED)
    waiting = ReviewItem.objects.get(effect=approval)
    done_before = in_review(make_effect("unknown", attempt=1))
    ReviewItem.objects.filter(pk=done_before.pk).update(resolved_at=done_before.opened_at)
    response = ask(
        signed_in(olga),
        [unknown, planned, waiting, done_before],
        action="fail",
        reason="Declined",
        evidence="Provider dashboard",
    )
    html = response.content.decode()
    assert "<strong>1 done</strong>, <strong>3 skipped</strong>" in html
    assert "not offered for an effect in planned" in html
    assert "needs four-eyes" in html
    assert "already resolved" in html
    assert Effect.objects.get(pk=planned.effect_id).status == "planned"
    assert Effect.objects.get(pk=approval.pk).status == "awaiting_approval"
    assert decisions_on(approval) == []


def test_an_item_another_operator_holds_is_skipped_not_decided_over(olga, otto, make_effect):
    effect = make_effect("planned")
    item = in_review(effect)
    hold_item(item, otto)
    html = ask(signed_in(olga), [item], action="cancel", reason="x").content.decode()
    assert "<strong>0 done</strong>, <strong>1 skipped</strong>" in html and "otto" in html
    assert Effect.objects.get(pk=effect.pk).status == "planned"


def test_four_eyes_is_skipped_even_where_the_item_gives_another_reason(olga, make_effect):
    approval = make_effect("awaiting_approval")
    item = in_review(approval, Reason.STALE)
    html = ask(signed_in(olga), [item], action="cancel", reason="x").content.decode()
    assert "needs four-eyes" in html
    assert Effect.objects.get(pk=approval.pk).status == "awaiting_approval"


def test_a_bulk_confirm_uses_each_items_suggested_reference_and_skips_those_without(
    olga, make_effect
):
    found, unfound = make_effect("unknown", attempt=1), make_effect("unknown", attempt=1)
    lookup_found(found, "ch_bulk_1")
    items = [in_review(found), in_review(unfound)]
    html = ask(
        signed_in(olga), items, action="confirm", reason="Lookup", evidence="Lookup events"
    ).content.decode()
    assert "<strong>1 done</strong>, <strong>1 skipped</strong>" in html
    assert "no provider reference suggested" in html
    found.refresh_from_db()
    assert found.status == "confirmed" and found.provider_ref == "ch_bulk_1"
    [decision] = decisions_on(found)
    recorded = decision.provenance["evidence"]
    assert recorded.startswith("Lookup events (") and "ch_bulk_1" in recorded
    assert Effect.objects.get(pk=unfound.pk).status == "unknown"


def test_all_matching_the_filter_takes_every_item_the_filter_names(olga, make_effect):
    wanted = [in_review(make_effect("planned", run_id="run-bulk")) for _ in range(2)]
    other = in_review(make_effect("planned", run_id="run-other"))
    response = signed_in(olga).post(
        "/queue/bulk",
        {
            "scope": "all",
            "query": "run=run-bulk",
            "action": "cancel",
            "reason": "Run abandoned",
            "confirmed": "1",
        },
    )
    assert "<strong>2 done</strong>" in response.content.decode()
    assert {Effect.objects.get(pk=i.effect_id).status for i in wanted} == {"cancelled"}
    assert Effect.objects.get(pk=other.effect_id).status == "planned"


@pytest.mark.parametrize(
    ("form", "why"),
    [
        ({"items": [], "action": "cancel", "reason": "x"}, "select at least one item"),
        ({"items": ["abc"], "action": "cancel", "reason": "x"}, "numbers"),
        ({"action": "explode", "reason": "x"}, "assign, or one of"),
        ({"action": "compensate", "reason": "x"}, "assign, or one of"),
        ({"action": "approve", "reason": "x"}, "assign, or one of"),
        ({"action": "cancel", "reason": " "}, "every decision needs a reason"),
        ({"action": "fail", "reason": "x"}, "what shows it"),
        ({"action": "assign", "assignee": ""}, "Choose an operator"),
        ({"action": "assign", "assignee": "999999"}, "cannot be assigned"),
        (
            {"scope": "all", "query": "status=exploded", "action": "cancel", "reason": "x"},
            "filter is not valid",
        ),
    ],
)
def test_bad_input_is_a_400_and_changes_nothing(olga, make_effect, form, why):
    item = in_review(make_effect("planned"))
    data = {"items": [str(item.pk)], "confirmed": "1", **form}
    response = signed_in(olga).post("/queue/bulk", data)
    assert response.status_code == 400 and why in response.content.decode()
    assert Effect.objects.get(pk=item.effect_id).status == "planned"
    assert not BulkJob.objects.exists()


def test_auditors_cannot_apply_bulk_actions_and_the_page_offers_them_none(audrey, make_effect):
    item = in_review(make_effect("planned"))
    client = signed_in(audrey)
    assert "/queue/bulk" not in client.get("/queue/").content.decode()
    assert ask(client, [item], action="cancel", reason="x").status_code == 403
    assert Effect.objects.get(pk=item.effect_id).status == "planned"


# --- In the background -----------------------------------------------------------------------


@pytest.fixture
def queue():
    """The project's rq queue (on this run's Redis database), empty before and after."""
    q = django_rq.get_queue("default")
    q.empty()
    yield q
    q.empty()


def work(queue: rq.Queue) -> None:
    """A real rq worker, in this process, until the queue is empty; no job may fail."""
    LedgerWorker([queue], connection=queue.connection).work(burst=True)
    assert queue.count == 0 and queue.failed_job_registry.count == 0


@pytest.mark.django_db(transaction=True)
def test_more_than_a_hundred_items_run_as_a_job_with_a_progress_page(olga, make_effect, queue):
    effects = [make_effect("planned") for _ in range(INLINE_LIMIT + 1)]
    items = [in_review(e) for e in effects]
    approval = make_effect("awaiting_approval")
    open_review(approval.id, Reason.APPROVAL_REQUIRED)
    items.append(ReviewItem.objects.get(effect=approval))
    client = signed_in(olga)
    response = ask(client, items, action="cancel", reason="Run abandoned")
    job = BulkJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/queue/bulk/{job.pk}"
    waiting = client.get(response["Location"]).content.decode()
    assert "Waiting for a worker" in waiting and 'hx-trigger="every 2s"' in waiting
    assert [(j.func_name, j.args) for j in queue.get_jobs()] == [
        (DISPATCHER, ("run-bulk-job", job.pk))
    ]
    assert Effect.objects.get(pk=effects[0].pk).status == "planned"  # nothing ran yet

    work(queue)

    job.refresh_from_db()
    assert job.state == "done" and len(job.results) == INLINE_LIMIT + 2
    assert {Effect.objects.get(pk=e.pk).status for e in effects} == {"cancelled"}
    assert all(len(decisions_on(e)) == 1 for e in effects)
    assert Effect.objects.get(pk=approval.pk).status == "awaiting_approval"
    page = client.get(f"/queue/bulk/{job.pk}", headers={"HX-Request": "true"}).content.decode()
    assert "Done:" in page and "101 done, 1 skipped" in page and "needs four-eyes" in page
    assert "every 2s" not in page  # finished: the page stops polling


@pytest.mark.django_db(transaction=True)
def test_a_job_delivered_twice_runs_once(olga, make_effect, queue):
    items = [in_review(make_effect("planned")) for _ in range(INLINE_LIMIT + 1)]
    ask(signed_in(olga), items, action="assign", assignee=str(olga.pk))
    job = BulkJob.objects.get()
    work(queue)
    run_job(job.pk)  # the same wake-up again
    job.refresh_from_db()
    assert job.state == "done" and len(job.results) == INLINE_LIMIT + 1


def _lose(job: BulkJob) -> None:
    """What a killed worker or a flushed Redis leaves: the row, its heartbeat going stale."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reviews_bulkjob SET heartbeat_at = now() - interval '6 minutes' WHERE id = %s",
            [job.pk],
        )


@pytest.mark.django_db(transaction=True)  # a job starts with a fresh database connection
def test_a_job_lost_from_the_queue_is_driven_again_from_its_row_and_resumes(
    olga, make_effect, queue
):
    first, second, third = (in_review(make_effect("planned")) for _ in range(3))
    client = signed_in(olga)
    # The worker cancelled the first item, recorded it, decided the second without recording
    # it, then died; Redis lost the job.
    ask(client, [first], action="cancel", reason="Run abandoned")
    ask(client, [second], action="cancel", reason="Run abandoned")
    job = BulkJob.objects.create(
        created_by=olga,
        action="cancel",
        reason="Run abandoned",
        item_ids=[first.pk, second.pk, third.pk],
        results=[{"item": first.pk, "effect": str(first.effect_id), "done": True, "why": ""}],
        state="running",
    )
    assert redrive_lost() == {"redriven": 0, "failed": 0}  # its heartbeat is fresh
    _lose(job)

    assert redrive_lost() == {"redriven": 1, "failed": 0}
    assert [j.args for j in queue.get_jobs()] == [("run-bulk-job", job.pk)]
    work(queue)

    job.refresh_from_db()
    assert (job.state, job.redriven) == ("done", 1)
    assert [(r["item"], r["done"], r["why"]) for r in job.results] == [
        (first.pk, True, ""),
        (second.pk, False, "already resolved"),  # decided before the loss, not twice
        (third.pk, True, ""),
    ]
    assert Effect.objects.get(pk=third.effect_id).status == "cancelled"
    assert [len(decisions_on(Effect.objects.get(pk=i.effect_id))) for i in (second, third)] == [
        1,
        1,
    ]


@pytest.mark.django_db(transaction=True)
def test_a_job_lost_too_often_fails_and_says_so(olga, make_effect, queue):
    item = in_review(make_effect("planned"))
    job = BulkJob.objects.create(
        created_by=olga, action="cancel", reason="x", item_ids=[item.pk], state="running"
    )
    for _ in range(REDRIVES):
        _lose(job)
        assert redrive_lost()["redriven"] == 1
    queue.empty()
    _lose(job)
    assert redrive_lost() == {"redriven": 0, "failed": 1}
    job.refresh_from_db()
    assert job.state == "failed"
    page = signed_in(olga).get(f"/queue/bulk/{job.pk}").content.decode()
    assert "Failed:" in page and f"Lost {REDRIVES + 1} times" in page
    run_job(job.pk)  # a late delivery does nothing to a failed job
    assert Effect.objects.get(pk=item.effect_id).status == "planned"


def test_a_job_is_only_its_creators(olga, otto, make_effect):
    job = BulkJob.objects.create(created_by=olga, action="cancel", reason="x", item_ids=[])
    assert signed_in(otto).get(f"/queue/bulk/{job.pk}").status_code == 404
    assert signed_in(olga).get("/queue/bulk/999999").status_code == 404
