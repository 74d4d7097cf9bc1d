"""The Python client and four-eyes: `ApprovalPending`, then waiting for an operator's decision,
against the real ledger over HTTP (live_server)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from ledger_client import ApprovalPending, Ledger

from ledger.models import Agent, Effect, Tool
from ledger.policy.agentkeys import issue_key
from reviews.decisions.decide import Ask, decide

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"amount": "2500.00", "currency": "EUR", "account": "acct_42"}


@pytest.fixture
def ledger(live_server, tools) -> Ledger:
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount",
        currency_path="currency",
        limit_amount_per_day={"EUR": "100000.00"},
        approve_above=Decimal("1000.00"),
    )
    client = Ledger(live_server.url, issue_key(Agent.objects.create(name="executor")), owner="w")
    yield client
    client.close()


def held(ledger: Ledger) -> str:
    """Enter the effect block: it must raise ApprovalPending before the body runs."""
    block = ledger.effect("run-1", "pay", "charge_card", "acct_42", BIG)
    with pytest.raises(ApprovalPending) as pending:
        block.__enter__()
    return pending.value.effect_id


def _decide(effect_id: str, action: str, user) -> None:
    effect = Effect.objects.get(pk=effect_id)
    decide(effect_id, Ask(action=action, reason="ok", expected_version=effect.version), user=user)


def test_an_effect_above_the_threshold_raises_approval_pending_then_runs_once_approved(
    ledger, olga
):
    effect_id = held(ledger)
    assert Effect.objects.get(pk=effect_id).status == "awaiting_approval"

    polls: list[float] = []

    def approve_while_waiting(seconds: float) -> None:
        polls.append(seconds)
        _decide(effect_id, "approve", olga)

    decided = ledger.wait_for_approval(effect_id, interval=0.5, sleep=approve_while_waiting)

    assert decided["status"] == "planned" and polls == [0.5]
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", BIG) as e:
        assert not e.replayed
        e.confirm("ch_approved", {"id": "ch_approved"})
    assert Effect.objects.get(pk=effect_id).status == "confirmed"


def test_waiting_gives_up_with_approval_pending_after_the_timeout(ledger):
    effect_id = held(ledger)

    with pytest.raises(ApprovalPending, match="still waits"):
        ledger.wait_for_approval(effect_id, timeout=0, sleep=lambda s: None)


def test_a_rejection_ends_the_wait_with_the_cancelled_effect(ledger, otto):
    effect_id = held(ledger)
    _decide(effect_id, "reject", otto)

    assert ledger.wait_for_approval(effect_id, sleep=lambda s: None)["status"] == "cancelled"
