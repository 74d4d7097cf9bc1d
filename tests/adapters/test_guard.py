"""`@guarded` on plain functions, sync and async, against the real ledger and the payments
sandbox: one charge per action whatever repeats it, the function left as it was, holds raised
or waited out, and bad input refused before anything is written."""

from __future__ import annotations

import asyncio
import inspect
import math
from typing import Annotated, Any

import httpx
import pytest
from ledger_client import (
    ApprovalPending,
    AsyncLedger,
    EffectClosed,
    Ledger,
    LedgerClientError,
    LedgerNotConfigured,
    LedgerUnavailable,
    NotSent,
    bind_step,
    current_effect,
    flush,
    guarded,
)
from ledger_client.guard import register_context_annotation
from ledger_client.models import Redacted

from ledger.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)

EUR = "EUR"


def _charge(stage, account: str, amount: str) -> dict[str, Any]:
    response = httpx.post(
        f"{stage.payments.url}/charges",
        json={"amount": amount, "currency": EUR, "account": account},
        headers={"Idempotency-Key": current_effect().idempotency_key},
        timeout=5,
        trust_env=False,
    )
    response.raise_for_status()
    return response.json()


@pytest.fixture
def ledger(stage):
    with Ledger(stage.url, stage.key, owner="guard-test", retries=1) as client:
        yield client


def make_pay(stage, ledger, calls: list[str], **options: Any):
    @guarded(tool="charge_card", target="{account}", ledger=ledger, **options)
    def pay(account: str, amount: str, currency: str = EUR) -> dict[str, Any]:
        """Charge an account."""
        calls.append(account)
        return _charge(stage, account, amount)

    return pay


def test_the_guard_keeps_the_function_as_it_was(stage, ledger):
    def pay(account: str, amount: str, currency: str = EUR) -> dict[str, Any]:
        """Charge an account."""
        return {}

    wrapped = guarded(tool="charge_card", ledger=ledger)(pay)
    assert inspect.signature(wrapped) == inspect.signature(pay)
    assert wrapped.__annotations__ == pay.__annotations__
    assert (wrapped.__name__, wrapped.__doc__) == (pay.__name__, pay.__doc__)
    assert wrapped.__wrapped__ is pay and wrapped.__ledger_guard__.tool == "charge_card"


def test_a_repeated_call_is_one_charge_and_returns_the_recorded_result(stage, ledger):
    calls: list[str] = []
    pay = make_pay(stage, ledger, calls)

    with bind_step("thread-1", "call-1"):
        first = pay("acct_1", "25.00")
        again = pay("acct_1", "25.00")

    assert calls == ["acct_1"] and again == first
    assert len(stage.charges()) == 1
    [effect] = stage.effects()
    assert (effect.status, effect.provider_ref, effect.target) == (
        "confirmed",
        first["id"],
        "acct_1",
    )
    assert effect.request == {"account": "acct_1", "amount": "25.00", "currency": EUR}


def test_with_a_business_key_a_new_call_id_and_25_0_for_25_are_the_same_action(stage, ledger):
    stage.key_fields("order_id")
    calls: list[Any] = []

    @guarded(tool="charge_card", ledger=ledger)
    def pay(order_id: int, amount: str, currency: str = EUR) -> dict[str, Any]:
        calls.append(order_id)
        return _charge(stage, "acct_1", amount)

    with bind_step("thread-1", "call-1"):
        first = pay(25, "10.00")
    with bind_step("thread-1", "call-2"):
        second = pay(25.0, "10.00")

    assert calls == [25] and second == first and len(stage.charges()) == 1


def test_an_exception_is_unknown_and_not_sent_is_planned(stage, ledger):
    @guarded(tool="charge_card", ledger=ledger)
    def flaky(account: str, amount: str, currency: str = EUR) -> None:
        raise TimeoutError("the provider did not answer")

    @guarded(tool="charge_card", ledger=ledger)
    def refused(account: str, amount: str, currency: str = EUR) -> None:
        raise NotSent("refused locally before sending", {"why": "closed account"})

    with bind_step("thread-1", "a"), pytest.raises(TimeoutError):
        flaky("acct_1", "1.00")
    with bind_step("thread-1", "b"), pytest.raises(NotSent):
        refused("acct_1", "1.00")

    assert [e.status for e in stage.effects()] == ["unknown", "planned"]
    assert stage.effects()[0].error["exception"] == "TimeoutError"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((object(), "1.00"), "argument 'account'"),
        (("acct_1", math.nan), "argument 'amount'"),
        (("acct_1", "1.00", {1: "x"}), "argument 'currency'"),
    ],
)
def test_arguments_without_a_canonical_form_are_refused_before_anything_is_written(
    stage, ledger, args, named
):
    calls: list[str] = []
    pay = make_pay(stage, ledger, calls)
    with bind_step("thread-1", "call-1"), pytest.raises(TypeError, match=named):
        pay(*args)
    assert calls == [] and stage.effects() == []


def test_no_step_identity_is_a_type_error_and_writes_nothing(stage, ledger):
    calls: list[str] = []
    with pytest.raises(TypeError, match="No step identity"):
        make_pay(stage, ledger, calls)("acct_1", "1.00")
    assert calls == [] and stage.effects() == []


def test_a_ledger_that_is_down_runs_nothing():
    calls: list[str] = []
    down = Ledger("http://127.0.0.1:9", "el_nokey", owner="t", retries=1, sleep=lambda s: None)

    @guarded(tool="charge_card", ledger=down)
    def pay(account: str) -> None:
        calls.append(account)

    with bind_step("thread-1", "call-1"), pytest.raises(LedgerUnavailable):
        pay("acct_1")
    assert calls == []


def test_a_held_amount_raises_approval_pending_with_what_to_show(stage, ledger):
    stage.hold_above("100.00")
    calls: list[str] = []
    pay = make_pay(stage, ledger, calls)

    with bind_step("thread-1", "call-1"), pytest.raises(ApprovalPending) as held:
        pay("acct_1", "500.00")

    approval = held.value.approval
    assert approval is not None and approval.tool == "charge_card"
    assert approval.request["amount"] == "500.00"
    assert calls == [] and stage.charges() == []
    stage.reject(held.value.effect_id)
    with bind_step("thread-1", "call-1"), pytest.raises(EffectClosed, match="cancelled"):
        pay("acct_1", "500.00")
    assert calls == []


def test_waiting_guard_runs_once_an_operator_approves(stage, ledger):
    stage.hold_above("100.00")
    calls: list[str] = []
    pay = make_pay(stage, ledger, calls, wait=True, wait_timeout=30)

    operator = stage.decide_when_held("approve")
    with bind_step("thread-1", "call-1"):
        result = pay("acct_1", "500.00")
    operator.join()

    assert calls == ["acct_1"] and len(stage.charges()) == 1
    assert result["id"] == stage.charges()[0]["id"]


def test_an_agent_may_cancel_what_waits_for_approval(stage, ledger):
    stage.hold_above("100.00")
    pay = make_pay(stage, ledger, [])
    with bind_step("thread-1", "call-1"), pytest.raises(ApprovalPending) as held:
        pay("acct_1", "500.00")
    assert ledger.cancel(held.value.effect_id, "the user said no").status == "cancelled"


def test_a_redacted_replay_returns_the_redaction_marker(stage, ledger):
    calls: list[str] = []
    pay = make_pay(stage, ledger, calls)
    with bind_step("thread-1", "call-1"):
        pay("acct_1", "1.00")
    flush()  # the confirmation is written behind; the update below must come after it
    Effect.objects.update(response={"redacted": True})
    with bind_step("thread-1", "call-1"):
        assert isinstance(pay("acct_1", "1.00"), Redacted)
    assert calls == ["acct_1"]


# --- The async path ------------------------------------------------------------------------


def test_async_guard_charges_once_and_never_blocks_the_loop(stage):
    calls: list[str] = []

    async def main() -> tuple[Any, Any, int]:
        async with AsyncLedger(stage.url, stage.key, owner="async-test") as ledger:

            @guarded(tool="charge_card", ledger=ledger)
            async def pay(account: str, amount: str, currency: str = EUR) -> dict[str, Any]:
                calls.append(account)
                async with httpx.AsyncClient(trust_env=False) as http:
                    response = await http.post(
                        f"{stage.payments.url}/charges",
                        json={"amount": amount, "currency": EUR, "account": account},
                        headers={"Idempotency-Key": current_effect().idempotency_key},
                    )
                return response.json()

            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            beat = asyncio.create_task(ticker())
            with bind_step("thread-1", "call-1"):
                first, second = await asyncio.gather(pay("acct_1", "5.00"), _later(pay))
            beat.cancel()
            return first, second, ticks

    first, second, ticks = asyncio.run(main())
    assert calls == ["acct_1"] and first == second and len(stage.charges()) == 1
    assert ticks > 0


async def _later(pay) -> Any:
    await asyncio.sleep(0.5)
    return await pay("acct_1", "5.00")


def test_async_guard_waits_for_the_operator_on_the_long_poll(stage):
    stage.hold_above("100.00")
    calls: list[str] = []

    async def main() -> Any:
        async with AsyncLedger(stage.url, stage.key, owner="async-test") as ledger:

            @guarded(tool="charge_card", ledger=ledger, wait=True, wait_timeout=30)
            async def pay(account: str, amount: str, currency: str = EUR) -> dict[str, Any]:
                calls.append(account)
                return {"id": "ch_local"}

            with bind_step("thread-1", "call-1"):
                return await pay("acct_1", "500.00")

    operator = stage.decide_when_held("approve")
    assert asyncio.run(main()) == {"id": "ch_local"}
    operator.join()
    assert calls == ["acct_1"]
    assert [e.status for e in stage.effects()] == ["confirmed"]


def test_no_ledger_configured_is_a_ledger_client_error():
    """Every exception of the client derives from `LedgerClientError`; this one is also the
    `RuntimeError` it was before it had a type."""
    assert issubclass(LedgerNotConfigured, LedgerClientError)
    assert issubclass(LedgerNotConfigured, RuntimeError)


def test_a_guard_with_no_ledger_configured_raises_ledger_not_configured(monkeypatch):
    import ledger_client.config

    monkeypatch.setattr(ledger_client.config, "_default", None)
    monkeypatch.delenv("EFFECT_LEDGER_URL", raising=False)
    monkeypatch.delenv("EFFECT_LEDGER_API_KEY", raising=False)
    calls: list[str] = []

    @guarded(tool="charge_card")
    def pay(account: str) -> None:
        calls.append(account)

    with bind_step("thread-1", "call-1"), pytest.raises(LedgerNotConfigured, match="configure"):
        pay("acct_1")
    assert calls == []


def test_every_client_exception_survives_pickling():
    """Durable engines (DBOS) keep an exception that left a step by pickling it."""
    import pickle

    from ledger_client import errors
    from ledger_client.models import Refusal

    samples = [
        errors.EffectClosed("closed", "cancelled", None),
        errors.NeedsReview("in doubt", "unknown", None),
        errors.ApprovalPending("held", "effect-1", None),
        errors.Halted("halted", None),
        errors.LimitExceeded("limited", 30, {"which": "tool:x:claims_per_minute"}),
        errors.Blocked("blocked", []),
        errors.LedgerRequestError(409, Refusal(error="invalid_transition", detail="no")),
        errors.NotSent("not sent", {"why": "closed account"}),
        errors.LedgerUnavailable("down"),
        errors.LedgerNotConfigured("no ledger"),
        errors.LedgerRequestError(
            422, Refusal(error="validation_error", detail="no", fields={"run_id": "too long"})
        ),
    ]
    for error in samples:
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and again.args == error.args
        assert again.__dict__ == error.__dict__


class FilledIn:
    """A framework's marker for a parameter it fills in itself."""


def test_parameters_a_framework_fills_in_are_left_out_of_the_request(stage, ledger):
    """A parameter annotated with a registered marker (LangChain's `InjectedToolCallId` is
    one) is the framework's, not the action's: a re-issued call with another value for it is
    the same request."""
    register_context_annotation(FilledIn)
    stage.key_fields("order_id")
    calls: list[str] = []

    @guarded(tool="charge_card", ledger=ledger)
    def pay(order_id: int, amount: str, call: Annotated[str, FilledIn], currency: str = EUR):
        calls.append(call)
        return {"id": f"ch_{order_id}"}

    with bind_step("thread-1", "call-1"):
        pay(7, "1.00", "call-1")
    with bind_step("thread-1", "call-2"):
        assert pay(7, "1.00", "call-2") == {"id": "ch_7"}

    assert calls == ["call-1"]
    [effect] = stage.effects()
    assert "call" not in effect.request


def test_a_compensation_asked_twice_without_a_key_is_one_compensation(stage, ledger):
    """The client sends no made-up key: the ledger's fixed default makes the repeat (a retry,
    or the same refund asked again after a restore) the same compensation."""
    pay = make_pay(stage, ledger, [])
    with bind_step("thread-1", "call-1"):
        charge = pay("acct_1", "3.00")
    [parent] = stage.effects()
    refund = {"charge": charge["id"], "amount": "3.00"}

    first = ledger.compensate(str(parent.id), request=refund, reason="order cancelled")
    again = ledger.compensate(str(parent.id), request=refund, reason="order cancelled")

    assert again.id == first.id and first.effect_key.endswith(":comp:1")
