"""Compensations the ledger sends itself (a refund an operator asked for): claimed under a lease,
sent through the tool's adapter with the effect's idempotency key, outcomes judged like any
lease holder's, and re-driven from the ledger when a wake-up is lost."""

from __future__ import annotations

import pytest

from config.tasks import DISPATCHER
from ledger.models import Effect, ReviewItem
from reconcilers.execution import execute_one, redrive_executions


@pytest.fixture
def refunds_at(tools):
    """Point charge_card and refund_card at a provider URL."""

    def point(url: str) -> None:
        for name in ("charge_card", "refund_card"):
            tools[name].reconciler_config = {"base_url": url, "timeout": 1}
            tools[name].save()

    return point


@pytest.fixture
def refund(make_effect):
    """A confirmed charge and its planned refund, as an operator's compensate decision leaves
    them."""
    charge = make_effect("confirmed", provider_ref="ch_missing")
    return make_effect(
        "planned",
        kind="compensation",
        parent=charge,
        tool="refund_card",
        request={"charge": "ch_missing", "amount": "1.00"},
    )


def test_a_refund_the_provider_refuses_fails_and_the_parent_goes_to_review(
    refund, refunds_at, payments_provider
):
    refunds_at(payments_provider.url)
    assert execute_one(refund.id) is True
    refund.refresh_from_db()
    assert refund.status == "failed"
    assert refund.error["status"] == 404
    parent = refund.parent
    parent.refresh_from_db()
    assert parent.status == "confirmed"
    assert ReviewItem.objects.get(effect=parent, resolved_at__isnull=True).reason == (
        "compensation_failed"
    )


def test_an_unreachable_provider_leaves_the_refund_planned_for_another_go(refund, refunds_at):
    refunds_at("http://127.0.0.1:1")  # nothing listens: the request never left
    assert execute_one(refund.id) is True
    refund.refresh_from_db()
    assert (refund.status, refund.attempt) == ("planned", 1)


def test_a_provider_that_never_answers_leaves_the_refund_unknown(
    refund, refunds_at, payments_provider
):
    refunds_at(payments_provider.url)
    payments_provider.set_faults(methods=("POST",), hang=3)
    assert execute_one(refund.id) is True
    refund.refresh_from_db()
    # A timeout is not a failure: reconciliation will ask the provider by key.
    assert refund.status == "unknown"
    assert refund.next_check_at is not None


def test_only_planned_compensations_are_sent(make_effect, refunds_at, payments_provider):
    refunds_at(payments_provider.url)
    action = make_effect("planned", tool="refund_card")
    assert execute_one(action.id) is False
    assert payments_provider.transactions() == []


@pytest.mark.django_db(transaction=True)
def test_the_sweep_re_drives_refunds_whose_wake_up_was_lost(refund, rq_queue):
    assert Effect.objects.get(pk=refund.pk).status == "planned"
    assert redrive_executions() == 1
    jobs = rq_queue.get_jobs()
    assert [(job.func_name, job.args) for job in jobs] == [
        (DISPATCHER, ("execute-compensation", str(refund.id)))
    ]
