"""The OpenAI Agents SDK adapter (openai-agents 0.24.0) on the stage: the real SDK driven by a
scripted model (no API key, no network, tracing off), the real ledger, the sandboxes, and a
real SIGKILL of an agent process.

- a crash after the provider charged and before the outcome was recorded: one charge, whether
  the run is done again with the same call id or, with a business key, with a new one;
- four-eyes: an amount above `approve_above` interrupts the run (the SDK's approval); the end
  user's `state.approve` only waits for the operator's decision in the ledger; `state.reject`
  cancels the effect;
- `Runner.run_sync` with a sync tool and `Runner.run` with an async one;
- the tool's schema with and without the guard;
- bad input: nothing written, the body not run.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ledger_client
import ledger_client.config
import pytest
from agents import Agent, Runner, ToolApprovalItem, UserError, function_tool
from django.db import connection
from ledger_client import LedgerUnavailable, guarded
from ledger_client.adapters.openai_agents import (
    approval_of,
    ledger_run,
    ledger_run_config,
    ledger_tool,
)

from tests.adapters.agents.openai_agents_shop import (
    NO_TRACING,
    Call,
    ScriptedModel,
    make_tools,
    outputs,
    post_charge,
    shop_agent,
)
from tests.adapters.conftest import AGENTS
from tests.helpers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

SHOP = AGENTS / "openai_agents_shop.py"


def said(output: Any) -> str:
    """A tool output as the model reads it (a result dict as its JSON)."""
    return output if isinstance(output, str) else json.dumps(output)


@contextmanager
def fails_with(cause: type[Exception], match: str) -> Iterator[None]:
    """The run fails with the SDK's `UserError` ("Error running tool ..."), whose cause is the
    adapter's exception."""
    with pytest.raises(UserError, match=f"Error running tool .*{match}") as failed:
        yield
    assert isinstance(failed.value.__cause__, cause)


def pay(amount: str, call_id: str = "call_pay_1", name: str = "charge_card") -> Call:
    return Call(name, {"amount": amount, "currency": "EUR", "account": "acct_1"}, call_id)


@pytest.fixture
def on_stage(stage, monkeypatch):
    """This process as an agent of the stage: the ledger configured, the sandboxes in the env."""
    monkeypatch.setattr(ledger_client.config, "_default", None)
    ledger_client.configure(stage.url, stage.key, owner="openai-agents-test", retries=1)
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    monkeypatch.setenv("SANDBOX_MESSAGING_URL", stage.messaging.url)
    return stage


def run_sync(agent: Any, first: Any, run_id: str = "order-1", **options: Any) -> Any:
    options.setdefault("run_config", NO_TRACING)
    with ledger_run(run_id):
        return Runner.run_sync(agent, first, **options)


# --- A crash between the provider's charge and the recorded outcome ------------------------------


def test_sigkill_after_the_charge_then_the_same_call_again_is_one_charge(stage, ledger_worker):
    crashed = stage.run_python(SHOP, "pay", "run-crash", "call_1", "25.00", OA_CRASH="after_charge")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(stage.charges()) == 1
    (effect,) = stage.effects()
    assert effect.status == "dispatching"

    # Done again while the dead process's lease holds: the guard waits for the ledger, which
    # finds the charge at the provider once the lease is out, and returns what it recorded.
    again = stage.run_python(
        SHOP, "pay", "run-crash", "call_1", "25.00", timeout=120, EFFECT_LEDGER_LEASE_SECONDS="2"
    )
    assert again.returncode == 0, again.stderr
    (charge,) = stage.charges()
    assert charge["id"] in said(json.loads(again.stdout)["outputs"]["call_1"])
    assert charge["received_idempotency_key"] == effect.idempotency_key
    assert [e.status for e in stage.effects()] == ["confirmed"]


def test_sigkill_then_a_new_call_id_for_the_same_order_is_one_charge(stage):
    stage.key_fields("order_id")
    crashed = stage.run_python(
        SHOP, "order", "run-a", "call_1", "ord_7", "40.00", OA_CRASH="after_charge"
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    (effect,) = stage.effects()
    assert stage.settle(effect.id).status == "confirmed"

    # Another process, another run, the model's call re-issued under a new call id.
    again = stage.run_python(SHOP, "order", "run-b", "call_2", "ord_7", "40.00")
    assert again.returncode == 0, again.stderr
    (charge,) = stage.charges()
    assert charge["id"] in said(json.loads(again.stdout)["outputs"]["call_2"])
    assert len(stage.effects()) == 1


# --- Four-eyes: the SDK's approval interruption --------------------------------------------------


def interrupted(stage, amount: str = "250.00", operator_wait: float = 30.0) -> tuple[Any, Any]:
    """A run whose charge the ledger holds for an operator: the SDK's interruption."""
    stage.hold_above("100.00")
    agent = shop_agent(ScriptedModel([pay(amount)]), make_tools(operator_wait))
    result = run_sync(agent, "Pay.")
    (item,) = result.interruptions
    assert isinstance(item, ToolApprovalItem) and item.name == "charge_card"
    (effect,) = stage.effects()
    assert effect.status == "awaiting_approval" and stage.charges() == []
    # The interruption names the effect the operator decides, for the application to show.
    approval = approval_of(item, "order-1")
    assert approval is not None and approval.effect_id == str(effect.id)
    assert (approval.tool, approval.target, approval.request["amount"]) == (
        "charge_card",
        "acct_1",
        amount,
    )
    return agent, result


def resume(agent: Any, result: Any, decide: str, **options: Any) -> Any:
    state = result.to_state()
    getattr(state, decide)(result.interruptions[0])
    return run_sync(agent, state, **options)


def test_operator_approves_then_end_user_approves_one_charge(on_stage):
    agent, result = interrupted(on_stage)
    on_stage.approve(on_stage.effects()[0].id)
    resumed = resume(agent, result, "approve")
    (charge,) = on_stage.charges()
    assert charge["id"] in said(outputs(resumed)["call_pay_1"])
    assert [e.status for e in on_stage.effects()] == ["confirmed"]


def test_end_user_approval_waits_for_the_operators_decision(on_stage):
    agent, result = interrupted(on_stage)
    effect_id = on_stage.effects()[0].id

    def operator() -> None:
        time.sleep(1.5)
        on_stage.approve(effect_id)
        connection.close()

    deciding = threading.Thread(target=operator)
    deciding.start()
    started = time.monotonic()
    resumed = resume(agent, result, "approve")  # waits on the ledger, then runs
    deciding.join()
    assert time.monotonic() - started >= 1.5
    (charge,) = on_stage.charges()
    assert charge["id"] in said(outputs(resumed)["call_pay_1"])
    assert [e.status for e in on_stage.effects()] == ["confirmed"]


def test_operator_rejects_nothing_is_charged(on_stage):
    agent, result = interrupted(on_stage)
    on_stage.reject(on_stage.effects()[0].id)
    resumed = resume(agent, result, "approve")
    assert "ended cancelled" in outputs(resumed)["call_pay_1"]
    assert on_stage.charges() == []
    assert [e.status for e in on_stage.effects()] == ["cancelled"]


def test_end_user_approval_alone_charges_nothing(on_stage):
    agent, result = interrupted(on_stage, operator_wait=1.0)
    resumed = resume(agent, result, "approve")
    answer = outputs(resumed)["call_pay_1"]
    assert "awaits an operator's approval" in answer and "Do not call the tool again" in answer
    assert on_stage.charges() == []
    assert [e.status for e in on_stage.effects()] == ["awaiting_approval"]

    # The interrupted snapshot resumed again once the operator approved: the same effect.
    on_stage.approve(on_stage.effects()[0].id)
    resume(agent, result, "approve")
    assert len(on_stage.charges()) == 1 and len(on_stage.effects()) == 1


def test_end_user_rejection_cancels_the_effect(on_stage):
    agent, result = interrupted(on_stage)
    resumed = resume(agent, result, "reject", run_config=ledger_run_config(NO_TRACING))
    assert "call_pay_1" in outputs(resumed)
    assert on_stage.charges() == []
    assert [e.status for e in on_stage.effects()] == ["cancelled"]


def test_the_tools_own_needs_approval_asks_the_end_user_before_the_ledger(on_stage):
    @ledger_tool(needs_approval=True, operator_wait=1.0)
    @guarded(tool="charge_card", target="{account}")
    def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
        """Charge the customer's card."""
        return post_charge({"amount": amount, "currency": currency, "account": account})

    on_stage.hold_above("100.00")
    agent = Agent(name="shop", model=ScriptedModel([pay("250.00")]), tools=[charge_card])
    result = run_sync(agent, "Pay.")
    assert len(result.interruptions) == 1 and on_stage.effects() == []  # the ledger not asked
    resumed = resume(agent, result, "approve")  # the end user's yes: now the ledger holds it
    assert "awaits an operator's approval" in outputs(resumed)["call_pay_1"]
    assert [e.status for e in on_stage.effects()] == ["awaiting_approval"]
    assert on_stage.charges() == []


def euro_tool() -> Any:
    @ledger_tool(operator_wait=1.0)
    @guarded(tool="charge_card", target="{account}")
    def charge_eur(amount: str, account: str, currency: str = "EUR") -> dict[str, Any]:
        """Charge the customer's card, in euros unless told otherwise."""
        return post_charge({"amount": amount, "currency": currency, "account": account})

    return charge_eur


def pay_eur(amount: str, call_id: str) -> Call:
    return Call("charge_eur", {"amount": amount, "account": "acct_1"}, call_id)


def test_an_argument_left_to_its_default_is_asked_of_the_ledger(on_stage):
    """The SDK would ask the end user about any call whose arguments validation changes (a
    default filled in) without asking the policy; the adapter asks the ledger with the request
    the guard records, defaults applied, so 25 EUR runs and only 250 EUR is held."""
    on_stage.hold_above("100.00")
    model = ScriptedModel([pay_eur("25.00", "call_small")], [pay_eur("250.00", "call_big")])
    result = run_sync(Agent(name="shop", model=model, tools=[euro_tool()]), "Pay twice.")
    (charge,) = on_stage.charges()
    assert (charge["amount"], charge["currency"]) == ("25.00", "EUR")
    assert charge["id"] in said(outputs(result)["call_small"])
    (item,) = result.interruptions
    small, big = on_stage.effects()
    assert small.request == {"amount": "25.00", "account": "acct_1", "currency": "EUR"}
    assert (small.status, big.status) == ("confirmed", "awaiting_approval")
    assert big.request["currency"] == "EUR"
    approval = approval_of(item)  # the call id alone, outside the run's block
    assert approval is not None and approval.effect_id == str(big.id)


def test_a_ledger_down_is_no_approval_request_with_a_defaulted_argument(on_stage):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ledger_client.configure(f"http://127.0.0.1:{port}", on_stage.key, retries=1)
    agent = Agent(name="shop", model=ScriptedModel([pay_eur("25.00", "c1")]), tools=[euro_tool()])
    with fails_with(LedgerUnavailable, "The ledger did not answer"):
        run_sync(agent, "Pay.")
    assert on_stage.effects() == [] and on_stage.charges() == []


def test_below_the_threshold_no_interruption(on_stage):
    on_stage.hold_above("100.00")
    agent = shop_agent(ScriptedModel([pay("25.00")]), make_tools())
    result = run_sync(agent, "Pay.")
    assert result.interruptions == []
    assert len(on_stage.charges()) == 1


# --- Sync and async ------------------------------------------------------------------------------


def test_run_sync_with_a_sync_tool_pays_and_messages_once(on_stage):
    message = Call(
        "send_message", {"to": "ann@example.com", "subject": "Paid", "body": "Thanks"}, "call_msg_1"
    )
    agent = shop_agent(ScriptedModel([pay("25.00")], [message]), make_tools())
    first = run_sync(agent, "Pay, then tell.")
    again = run_sync(agent, "Pay, then tell.")  # the same run again: replays, no new effects
    (charge,) = on_stage.charges()
    (sent,) = on_stage.messages()
    for result in (first, again):
        out = outputs(result)
        assert charge["id"] in said(out["call_pay_1"]) and sent["id"] in said(out["call_msg_1"])
    assert [(e.tool, e.status) for e in on_stage.effects()] == [
        ("charge_card", "confirmed"),
        ("send_email", "confirmed"),
    ]
    assert charge["received_idempotency_key"] == on_stage.effects()[0].idempotency_key


def test_runner_run_with_an_async_tool_pays_once(on_stage):
    context = {"ledger_run_id": "order-async"}  # the run identity on the run's context
    agent = shop_agent(ScriptedModel([pay("30.00", name="pay_async")]), make_tools())

    async def twice() -> list[Any]:
        return [
            await Runner.run(agent, "Pay.", context=context, run_config=NO_TRACING)
            for _ in range(2)
        ]

    results = asyncio.run(twice())
    (charge,) = on_stage.charges()
    assert all(charge["id"] in said(outputs(r)["call_pay_1"]) for r in results)
    (effect,) = on_stage.effects()
    assert (effect.run_id, effect.step_id, effect.status) == (
        "order-async",
        "call_pay_1",
        "confirmed",
    )


# --- The schema ----------------------------------------------------------------------------------


def test_the_tool_schema_is_the_same_with_and_without_the_guard():
    def charge(amount: str, currency: str, account: str = "acct_1") -> dict[str, Any]:
        """Charge a card.

        Args:
            amount: The amount, as text.
            currency: The ISO currency code.
            account: The customer's account.
        """
        return {}

    async def charge_async(amount: str, tags: list[str]) -> dict[str, Any]:
        """Charge a card, async."""
        return {}

    for fn in (charge, charge_async):
        plain = function_tool(fn)
        for tool in (
            function_tool(guarded(tool="charge_card")(fn)),
            ledger_tool(guarded(tool="charge_card")(fn)),
        ):
            assert (tool.name, tool.description) == (plain.name, plain.description)
            assert tool.params_json_schema == plain.params_json_schema
            assert tool.strict_json_schema == plain.strict_json_schema
    assert "amount" in function_tool(charge).params_json_schema["properties"]


# --- Bad input: a clear error, nothing written, the body not run ---------------------------------


def test_no_run_identity_is_a_type_error_and_writes_nothing(on_stage):
    agent = shop_agent(ScriptedModel([pay("25.00")]), make_tools())
    with fails_with(TypeError, "No run identity"):
        Runner.run_sync(agent, "Pay.", run_config=NO_TRACING)
    assert on_stage.effects() == [] and on_stage.charges() == []


def test_arguments_without_a_canonical_form_are_refused_before_the_ledger(on_stage):
    call = Call("tag_charge", {"amount": "25.00", "tags": ["vip"]}, "call_tag_1")
    agent = shop_agent(ScriptedModel([call]), make_tools())
    # A set's validation changes the arguments; no end user is asked about a call that fails.
    with fails_with(TypeError, "argument 'tags'"):
        run_sync(agent, "Pay.")
    assert on_stage.effects() == [] and on_stage.charges() == []


def test_the_ledger_down_is_a_clear_error_and_the_tool_does_not_run(on_stage):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ledger_client.configure(f"http://127.0.0.1:{port}", on_stage.key, retries=1)
    agent = shop_agent(ScriptedModel([pay("25.00")]), make_tools())
    with fails_with(LedgerUnavailable, "The ledger did not answer"):
        run_sync(agent, "Pay.")
    assert on_stage.effects() == [] and on_stage.charges() == []


def test_the_ledger_down_at_the_call_itself(on_stage):
    agent, result = interrupted(on_stage)
    on_stage.approve(on_stage.effects()[0].id)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ledger_client.configure(f"http://127.0.0.1:{port}", on_stage.key, retries=1)
    with fails_with(LedgerUnavailable, "The ledger did not answer"):
        resume(agent, result, "approve")
    assert on_stage.charges() == []
    assert [e.status for e in on_stage.effects()] == ["planned"]


# --- The example ---------------------------------------------------------------------------------


def test_the_example_pays_and_messages_once(stage):
    done = stage.run_python(ROOT / "examples" / "openai_agents" / "agent.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "charges at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert "messages at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert len(stage.payment_intents()) == 1 and len(stage.messages()) == 1
