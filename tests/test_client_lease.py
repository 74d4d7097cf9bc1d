"""The client starts no provider call on a lease that could run out during it
(`Ledger(call_timeout=…)`, `Effect.ensure_lease`): fencing stops outcome writes, not calls."""

from __future__ import annotations

from typing import Any

import pytest
from ledger_client import LeaseTooShort, bind_step, current_effect, guarded

from tests.factories import CHARGE
from tests.test_client import ManualClock, charge, make_ledger, status_of

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["make_ledger"]  # the fixture, used by every test here


def test_a_guarded_call_does_not_start_on_a_lease_shorter_than_the_call_timeout(
    make_ledger, payments_provider
):
    ledger = make_ledger(lease_seconds=2, call_timeout=5, clock=ManualClock())
    called = []

    @guarded(tool="charge_card", target="acct_42", ledger=ledger)
    def pay(amount: str, currency: str, account: str) -> dict[str, Any]:
        called.append(current_effect().id)
        return charge(payments_provider, current_effect())

    with pytest.raises(LeaseTooShort) as refused, bind_step(run_id="run-1", call_id="pay"):
        pay(**CHARGE)

    assert called == []
    assert payments_provider.transactions() == []
    # Reported not_sent: the effect is planned again, free to be claimed with a longer lease.
    effect_id = str(refused.value).split(":")[0].removeprefix("Effect ")
    assert status_of(effect_id) == "planned"


def test_a_guarded_call_starts_while_enough_of_the_lease_is_left(make_ledger, payments_provider):
    ledger = make_ledger(lease_seconds=30, call_timeout=5, clock=ManualClock())

    @guarded(tool="charge_card", target="acct_42", ledger=ledger)
    def pay(amount: str, currency: str, account: str) -> dict[str, Any]:
        assert current_effect().lease_left() > 25
        return charge(payments_provider, current_effect())

    with bind_step(run_id="run-1", call_id="pay"):
        response = pay(**CHARGE)

    assert [t["id"] for t in payments_provider.transactions()] == [response["id"]]


def test_ensure_lease_in_a_block_refuses_once_too_little_is_left(make_ledger):
    ledger = make_ledger(lease_seconds=2, clock=ManualClock())

    block = ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE)
    with pytest.raises(LeaseTooShort), block as e:
        e.ensure_lease(3)

    assert e.outcome == "not_sent"
    assert status_of(e.id) == "planned"
