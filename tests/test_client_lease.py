"""The client starts no provider call on a lease that could run out during it
(`Ledger(call_timeout=…)`, `Effect.ensure_lease`): fencing stops outcome writes, not calls."""

from __future__ import annotations

import pytest
from ledger_client import LeaseTooShort

from tests.factories import CHARGE
from tests.test_client import ManualClock, charge, make_ledger, status_of

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["make_ledger"]  # the fixture, used by every test here


def test_a_step_does_not_start_the_call_on_a_lease_shorter_than_the_call_timeout(
    make_ledger, payments_provider
):
    ledger = make_ledger(lease_seconds=2, call_timeout=5, clock=ManualClock())
    called = []

    @ledger.step(tool="charge_card", target="acct_42")
    def pay(e, request):
        called.append(e.id)
        return charge(payments_provider, e)

    with pytest.raises(LeaseTooShort) as refused:
        pay("run-1", "pay", CHARGE)

    assert called == []
    assert payments_provider.transactions() == []
    # Reported not_sent: the effect is planned again, free to be claimed with a longer lease.
    effect_id = str(refused.value).split(":")[0].removeprefix("Effect ")
    assert status_of(effect_id) == "planned"


def test_a_step_starts_the_call_while_enough_of_the_lease_is_left(make_ledger, payments_provider):
    ledger = make_ledger(lease_seconds=30, call_timeout=5, clock=ManualClock())

    @ledger.step(tool="charge_card", target="acct_42")
    def pay(e, request):
        assert e.lease_left() > 25
        return charge(payments_provider, e)

    response = pay("run-1", "pay", CHARGE)

    assert [t["id"] for t in payments_provider.transactions()] == [response["id"]]


def test_ensure_lease_in_a_block_refuses_once_too_little_is_left(make_ledger):
    ledger = make_ledger(lease_seconds=2, clock=ManualClock())

    block = ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE)
    with pytest.raises(LeaseTooShort), block as e:
        e.ensure_lease(3)

    assert e.outcome == "not_sent"
    assert status_of(e.id) == "planned"
