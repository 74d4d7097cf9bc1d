"""The Python client meets a limit: `LimitExceeded(retry_after)`, over real HTTP (live_server)."""

from __future__ import annotations

import pytest
from ledger_client import Ledger, LedgerRequestError, LimitExceeded

from ledger.containment.keys import issue_key
from ledger.models import Agent, Tool
from tests.factories import CHARGE

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_claim_past_a_limit_raises_limit_exceeded_with_retry_after(live_server, tools):
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", limit_amount_per_day={"EUR": "15.00"}
    )
    ledger = Ledger(live_server.url, issue_key(Agent.objects.create(name="executor")), owner="w")
    try:
        with ledger.effect("run-1", "first", "charge_card", "acct_42", CHARGE) as e:
            e.confirm("ch_1", {"id": "ch_1"})

        with (
            pytest.raises(LimitExceeded) as refused,
            ledger.effect("run-1", "second", "charge_card", "acct_42", CHARGE),
        ):
            pytest.fail("the limit must stop the block before it runs")

        assert 86000 < refused.value.retry_after <= 86400
        assert refused.value.limit["which"] == "tool:charge_card:amount_per_day:EUR"
    finally:
        ledger.close()


def test_a_refused_request_names_its_fields_in_the_clients_error(live_server, tools):
    """A 422's per-field problems reach the client's error: its `fields` and its message."""
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", limit_amount_per_day={"EUR": "15.00"}
    )
    ledger = Ledger(live_server.url, issue_key(Agent.objects.create(name="executor")), owner="w")
    try:
        with (
            pytest.raises(LedgerRequestError) as refused,
            ledger.effect("run-1", "pay", "charge_card", "acct_42", {"amount": "10.00"}),
        ):
            pytest.fail("a request without its currency must not be claimed")
    finally:
        ledger.close()

    error = refused.value
    assert (error.status, error.code) == (422, "validation_error")
    assert error.fields == {"request.currency": "the currency is required"}
    assert "request.currency: the currency is required" in str(error)
    assert "needs the request's currency" in str(error)
