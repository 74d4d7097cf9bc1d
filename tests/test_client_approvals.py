"""The Python client and four-eyes: `ApprovalPending`, then waiting for an operator's decision
on the ledger's long poll (`wait_for_decision`), against the real ledger over HTTP
(live_server)."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest
from django.db import connection
from ledger_client import ApprovalPending, Ledger

from ledger.containment.keys import issue_key
from ledger.models import Agent, Effect, Tool
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

    def approve() -> None:
        try:
            _decide(effect_id, "approve", olga)
        finally:
            connection.close()

    # The operator approves while the client waits: the long poll answers at once, no polling.
    approver = threading.Timer(0.5, approve)
    asked = time.monotonic()
    approver.start()
    try:
        decided = ledger.wait_for_decision(effect_id, timeout=20)
    finally:
        approver.join()

    assert decided.status == "planned"
    assert time.monotonic() - asked < 3.0
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", BIG) as e:
        assert not e.replayed
        e.confirm("ch_approved", {"id": "ch_approved"})
    assert Effect.objects.get(pk=effect_id).status == "confirmed"


def test_waiting_gives_up_after_the_timeout_with_the_effect_still_awaiting_approval(ledger):
    effect_id = held(ledger)

    asked = time.monotonic()
    record = ledger.wait_for_decision(effect_id, timeout=2)

    assert record.status == "awaiting_approval" and record.id == effect_id
    assert 0.9 <= time.monotonic() - asked < 4.0


def test_a_rejection_ends_the_wait_with_the_cancelled_effect(ledger, otto):
    effect_id = held(ledger)
    _decide(effect_id, "reject", otto)

    # `wait_for_approval` is the same wait under its earlier name.
    assert ledger.wait_for_approval(effect_id, timeout=5).status == "cancelled"
