"""The Pydantic AI adapter (pydantic-ai-slim 2.68.0), with the real framework and its own
`FunctionModel`, against the real ledger and the sandbox providers (`stage`).

- a SIGKILL between the provider's charge and the recorded outcome: one charge after resuming;
- four-eyes: the ledger's hold is the framework's deferred approval; only an operator's
  decision in the ledger lets the charge happen; the end user's denial cancels the effect;
- `run_sync` and `run`, sync and async tool functions, with and without a `RunContext`;
- the tool definitions the framework builds are the same with and without `@guarded`;
- bad input (arguments without a canonical form, no run identity, an ambiguous call id, a
  ledger that does not answer) raises before anything is written or run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import ledger_client.config
import pytest
from django.db import connection
from ledger_client import LedgerUnavailable, guarded
from ledger_client.adapters.pydantic_ai import LedgerCapability
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolDenied,
    capture_run_messages,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from ledger.models import Reason
from ledger.rules.reviewqueue import open_review
from tests.adapters.agents import pydantic_ai_shop as shop

AGENT = Path(__file__).resolve().parent / "agents" / "pydantic_ai_agent.py"


@pytest.fixture
def on_stage(stage: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process as an agent of the stage: the ledger configured, the sandbox in the env."""
    monkeypatch.setattr(ledger_client.config, "_default", None)
    ledger_client.configure(stage.url, stage.key, owner="pydantic-ai-test", retries=1)
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    shop.RAN.clear()
    yield stage


def run(agent: Agent[None, Any], runner: str = "run_sync", /, *args: Any, **kwargs: Any) -> Any:
    if runner == "run_sync":
        return agent.run_sync(*args, **kwargs)
    return asyncio.run(agent.run(*args, **kwargs))


def results(result: Any) -> list[dict[str, Any]]:
    return shop.tool_results(result.all_messages())


def approve(call_id: str) -> DeferredToolResults:
    return DeferredToolResults(approvals={call_id: True})


# --- A crash between the provider's commit and the recorded outcome ---------------------------


def test_sigkill_after_the_charge_resumes_to_one_charge(
    stage: Any, tmp_path: Path, ledger_worker: Any
) -> None:
    history = tmp_path / "history.json"
    agent = stage.start_python(
        AGENT, "pay", "25.00", str(history), "conv-crash", PA_TEST_HANG_AFTER_CHARGE="1"
    )
    assert agent.stdout is not None
    line = agent.stdout.readline()
    if not line.startswith("CHARGED "):
        agent.kill()
        pytest.fail(f"the agent did not reach the charge: {line!r} {agent.communicate()}")
    os.kill(agent.pid, signal.SIGKILL)
    assert agent.wait(timeout=10) == -signal.SIGKILL
    [effect] = stage.effects("charge_card")
    # Keyed by its position (the conversation's first model response), not the call id.
    assert (effect.status, effect.run_id, effect.step_id) == ("dispatching", "conv-crash", "turn-1")
    assert str(effect.id) == line.split()[1]
    assert len(stage.charges()) == 1

    # Taken up again while the dead process's lease holds: the guard waits for the ledger,
    # which finds the charge at the provider once the lease is out, and returns it.
    done = _resume(stage, history)
    [charge] = stage.charges()
    [result] = done["results"]
    assert result["outcome"] == "success" and result["content"]["id"] == charge["id"]
    assert done["conversation"] == "conv-crash"
    assert [e.status for e in stage.effects("charge_card")] == ["confirmed"]


def _resume(stage: Any, history: Path) -> dict[str, Any]:
    done = stage.run_python(
        AGENT, "resume", str(history), timeout=120, EFFECT_LEDGER_LEASE_SECONDS="2"
    )
    assert done.returncode == 0, done.stderr
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    report: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return report


# --- Sync and async, with and without a RunContext ----------------------------------------------

PATHS = [
    ("run_sync", "sync", False),
    ("run_sync", "async", True),
    ("run", "sync", True),
    ("run", "async", False),
]


@pytest.mark.parametrize(("runner", "flavour", "with_ctx"), PATHS)
def test_one_charge_and_a_replay(on_stage: Any, runner: str, flavour: Any, with_ctx: bool) -> None:
    steps = [[("charge_card", shop.charge("25.00"), "call_pay")]]
    agent = shop.build(steps, flavour=flavour, with_ctx=with_ctx)
    first = run(agent, runner, "Pay the invoice.")
    [charge] = on_stage.charges()
    [result] = results(first)
    assert result["outcome"] == "success" and result["content"]["id"] == charge["id"]
    [effect] = on_stage.effects("charge_card")
    assert effect.status == "confirmed" and effect.provider_ref == charge["id"]
    assert (effect.run_id, effect.step_id) == (first.conversation_id, "turn-1")
    assert effect.request == {"amount": "25.00", "currency": "EUR", "account": "acct_1"}
    assert charge["received_idempotency_key"] == effect.idempotency_key

    # The same conversation up to the model's call, run again: the recorded charge comes back.
    asked = _up_to_the_call(first.all_messages())
    again = run(agent, runner, message_history=asked)
    assert results(again)[-1]["content"] == result["content"]
    assert len(on_stage.charges()) == 1 and shop.RAN == ["charge_card 25.00"]


def _up_to_the_call(messages: list[ModelMessage]) -> list[ModelMessage]:
    last = max(i for i, m in enumerate(messages) if isinstance(m, ModelResponse) and m.tool_calls)
    return messages[: last + 1]


# --- Four-eyes: the ledger's hold, the framework's deferred approval ---------------------------


def _held(on_stage: Any, call_id: str, wait: float = 0) -> tuple[Agent[None, Any], Any, str]:
    """A charge above the threshold: the run ends asking for approval, nothing is charged."""
    on_stage.hold_above("100.00")
    steps = [[("charge_card", shop.charge("250.00"), call_id)]]
    agent = shop.build(steps, capability=LedgerCapability(operator_wait=wait))
    first = agent.run_sync("Pay the big invoice.")
    assert isinstance(first.output, DeferredToolRequests)
    [asked] = first.output.approvals
    metadata = first.output.metadata[call_id]
    assert asked.tool_call_id == call_id and metadata["ledger_tool"] == "charge_card"
    assert metadata["ledger_request"]["amount"] == "250.00"
    [effect] = on_stage.effects("charge_card")
    assert str(effect.id) == metadata["ledger_effect_id"]
    assert effect.status == "awaiting_approval" and on_stage.charges() == []
    return agent, first, metadata["ledger_effect_id"]


def _decide_later(action: Callable[[Any], Any], effect_id: str) -> threading.Thread:
    def decide() -> None:
        try:
            action(effect_id)
        finally:
            connection.close()  # this thread's own database connection

    timer = threading.Timer(1.5, decide)
    timer.start()
    return timer


def test_only_the_operator_approves(on_stage: Any) -> None:
    agent, first, effect_id = _held(on_stage, "call_big", wait=1)

    # The end user approves; no operator has: nothing is charged, the run asks again.
    alone = agent.run_sync(
        message_history=first.all_messages(), deferred_tool_results=approve("call_big")
    )
    assert isinstance(alone.output, DeferredToolRequests)
    assert [c.tool_call_id for c in alone.output.approvals] == ["call_big"]
    assert on_stage.charges() == [] and shop.RAN == []
    assert on_stage.effects("charge_card")[0].status == "awaiting_approval"

    # Approved again by the user, the run waits; an operator approves meanwhile: one charge.
    waiting = shop.build(
        [[("charge_card", shop.charge("250.00"), "call_big")]],
        capability=LedgerCapability(operator_wait=20),
    )
    operator = _decide_later(on_stage.approve, effect_id)
    done = waiting.run_sync(
        message_history=alone.all_messages(), deferred_tool_results=approve("call_big")
    )
    operator.join()
    assert isinstance(done.output, str)
    [charge] = on_stage.charges()
    assert results(done)[-1]["content"]["id"] == charge["id"]
    assert [e.status for e in on_stage.effects("charge_card")] == ["confirmed"]


def test_an_operator_approves_first_then_the_user(on_stage: Any) -> None:
    agent, first, effect_id = _held(on_stage, "call_big")
    on_stage.approve(effect_id)
    assert on_stage.charges() == []  # the operator's approval alone runs nothing either
    done = agent.run_sync(
        message_history=first.all_messages(), deferred_tool_results=approve("call_big")
    )
    assert isinstance(done.output, str) and len(on_stage.charges()) == 1


def test_an_operators_rejection_charges_nothing(on_stage: Any) -> None:
    agent, first, effect_id = _held(on_stage, "call_big")
    on_stage.reject(effect_id)
    done = agent.run_sync(
        message_history=first.all_messages(), deferred_tool_results=approve("call_big")
    )
    [result] = results(done)
    assert result["outcome"] == "failed" and "Do not retry" in result["content"]
    assert on_stage.charges() == [] and shop.RAN == []
    assert [e.status for e in on_stage.effects("charge_card")] == ["cancelled"]


def _lost_answer(stage: Any, monkeypatch: pytest.MonkeyPatch, agent: Any) -> list[Any]:
    """A first run whose charge gets no answer (the guard reports `unknown`), its history as
    saved after its last node: up to the model's response with the call, as after a crash
    (the framework adds an "interrupted" result when the run raises instead)."""
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", "http://127.0.0.1:9")
    with capture_run_messages() as messages, pytest.raises(httpx.ConnectError):
        agent.run_sync("Pay the invoice.")
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    assert [e.status for e in stage.effects("charge_card")] == ["unknown"]
    last = max(i for i, m in enumerate(messages) if isinstance(m, ModelResponse))
    return list(messages[: last + 1])


def test_an_effect_an_operator_must_decide_is_deferred_until_they_have(
    on_stage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = shop.build(
        [[("charge_card", shop.charge("25.00"), "call_pay")]],
        capability=LedgerCapability(operator_wait=1),
    )
    lost = _lost_answer(on_stage, monkeypatch, agent)
    [effect] = on_stage.effects("charge_card")
    open_review(effect.id, Reason.INCONCLUSIVE)  # a person decides: waiting would not help

    paused = agent.run_sync(message_history=lost)  # the framework's own resume
    assert isinstance(paused.output, DeferredToolRequests)
    assert [c.tool_call_id for c in paused.output.approvals] == ["call_pay"]
    shown = paused.output.metadata["call_pay"]
    assert (shown["ledger_status"], shown["ledger_effect_id"]) == ("review", str(effect.id))
    # Answered before anyone decided: deferred again, and nothing ran.
    again = agent.run_sync(
        message_history=paused.all_messages(), deferred_tool_results=approve("call_pay")
    )
    assert isinstance(again.output, DeferredToolRequests) and on_stage.charges() == []
    # The operator finds it never reached the provider and retries it: it runs once.
    on_stage._decide(effect.id, "retry")
    done = agent.run_sync(
        message_history=again.all_messages(), deferred_tool_results=approve("call_pay")
    )
    assert isinstance(done.output, str)
    [charge] = on_stage.charges()
    assert results(done)[-1]["content"]["id"] == charge["id"]
    assert [e.status for e in on_stage.effects("charge_card")] == ["confirmed"]


def test_without_pausing_for_review_the_model_is_told_not_known_yet(
    on_stage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = shop.build(
        [[("charge_card", shop.charge("25.00"), "call_pay")]],
        capability=LedgerCapability(pause_for_review=False),
    )
    lost = _lost_answer(on_stage, monkeypatch, agent)
    [effect] = on_stage.effects("charge_card")
    open_review(effect.id, Reason.INCONCLUSIVE)
    done = agent.run_sync(message_history=lost)
    [result] = results(done)
    assert result["outcome"] == "failed" and "Outcome not known yet" in result["content"]
    assert on_stage.charges() == []


def test_the_users_denial_cancels_the_effect(on_stage: Any) -> None:
    agent, first, _ = _held(on_stage, "call_big")
    denied = DeferredToolResults(
        approvals={"call_big": ToolDenied("The customer changed their mind.")}
    )
    done = asyncio.run(
        agent.run(message_history=first.all_messages(), deferred_tool_results=denied)
    )
    [result] = results(done)
    assert result["outcome"] == "denied"
    [effect] = on_stage.effects("charge_card")
    assert effect.status == "cancelled" and on_stage.charges() == [] and shop.RAN == []


# --- The tool schema --------------------------------------------------------------------------


def _tool_definitions(*functions: Callable[..., Any], takes_ctx: bool) -> list[ToolDefinition]:
    seen: list[ToolDefinition] = []

    def look(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(info.function_tools)
        return ModelResponse(parts=[TextPart("nothing to do")])

    agent = Agent(FunctionModel(look), capabilities=[LedgerCapability()])
    for function in functions:
        (agent.tool if takes_ctx else agent.tool_plain)(function)
    agent.run_sync("Look at the tools.")
    return seen


def pay(
    amount: str, currency: str = "EUR", *, account: str, note: str | None = None
) -> dict[str, Any]:
    """Charge a card.

    Args:
        amount: The amount, in major units ("25.00").
        currency: ISO 4217 code.
        account: The customer's account.
        note: Shown on the statement.
    """
    return {}


async def apay(
    ctx: RunContext[None], amount: str, items: list[int], *, account: str
) -> dict[str, Any]:
    """Charge a card, asynchronously.

    Args:
        ctx: The run.
        amount: The amount.
        items: Order lines.
        account: The customer's account.
    """
    return {}


def test_the_tool_schema_is_the_same_with_and_without_the_guard() -> None:
    for function, takes_ctx in ((pay, False), (apay, True)):
        plain = _tool_definitions(function, takes_ctx=takes_ctx)
        with_guard = _tool_definitions(guarded(tool="charge_card")(function), takes_ctx=takes_ctx)
        assert plain and plain == with_guard
        [tool] = with_guard
        assert tool.name == function.__name__ and tool.description
        assert "ctx" not in tool.parameters_json_schema["properties"]
        assert tool.parameters_json_schema["properties"]["amount"]["description"]


# --- Bad input writes nothing -------------------------------------------------------------------


def test_arguments_without_a_canonical_form_write_nothing(on_stage: Any) -> None:
    ran: list[float] = []
    agent = Agent(
        shop.script_model([[("charge_card", {"amount": float("nan"), "account": "acct_1"}, "c1")]]),
        capabilities=[LedgerCapability()],
    )

    @agent.tool_plain
    @guarded(tool="charge_card", target="{account}")
    def charge_card(amount: float, account: str) -> dict[str, Any]:
        """Charge."""
        ran.append(amount)
        return {}

    with pytest.raises(TypeError, match="amount"):
        agent.run_sync("Pay NaN.")
    assert ran == [] and on_stage.effects() == [] and on_stage.charges() == []


@pytest.mark.parametrize("how", ["no capability", "no run id"])
def test_no_run_identity_writes_nothing(on_stage: Any, how: str) -> None:
    steps = [[("charge_card", shop.charge("25.00"), "c1")]]
    if how == "no capability":
        agent: Agent[None, Any] = Agent(shop.script_model(steps))
        shop.register_charge(agent, flavour="async", with_ctx=False)
    else:
        agent = shop.build(steps, capability=LedgerCapability(run_id=lambda ctx: None))
    with pytest.raises(TypeError, match="No step identity"):
        agent.run_sync("Pay.")
    assert shop.RAN == [] and on_stage.effects() == [] and on_stage.charges() == []


def test_a_call_id_used_twice_in_a_conversation_is_refused(on_stage: Any) -> None:
    steps = [
        [("charge_card", shop.charge("5.00"), "same")],
        [("charge_card", shop.charge("6.00"), "same")],
    ]
    with pytest.raises(TypeError, match="more than one model response"):
        shop.build(steps).run_sync("Pay twice.")
    assert shop.RAN == ["charge_card 5.00"]
    assert len(on_stage.effects("charge_card")) == 1 and len(on_stage.charges()) == 1


def test_a_ledger_that_does_not_answer_runs_nothing(on_stage: Any) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    ledger_client.configure(f"http://127.0.0.1:{port}", on_stage.key, retries=1)
    agent = shop.build([[("charge_card", shop.charge("25.00"), "c1")]], flavour="async")
    with pytest.raises(LedgerUnavailable):
        agent.run_sync("Pay.")
    assert shop.RAN == [] and on_stage.effects() == [] and on_stage.charges() == []


def test_a_denial_next_to_a_call_still_waiting(on_stage: Any) -> None:
    """Two held calls in one response: the user denies one and approves the other, which still
    waits for its operator, so the run ends asking again; the denied one is cancelled."""
    on_stage.hold_above("100.00")
    steps = [
        [
            ("charge_card", shop.charge("250.00"), "call_a"),
            ("charge_card", shop.charge("300.00", account="acct_2"), "call_b"),
        ]
    ]
    agent = shop.build(steps, capability=LedgerCapability(operator_wait=0))
    first = agent.run_sync("Pay both.")
    assert isinstance(first.output, DeferredToolRequests) and len(first.output.approvals) == 2
    answers = DeferredToolResults(approvals={"call_a": ToolDenied("No."), "call_b": True})
    again = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=answers)
    assert isinstance(again.output, DeferredToolRequests)
    assert [c.tool_call_id for c in again.output.approvals] == ["call_b"]
    status = {e.target: e.status for e in on_stage.effects("charge_card")}
    assert status == {"acct_1": "cancelled", "acct_2": "awaiting_approval"}
    assert on_stage.charges() == [] and shop.RAN == []


def test_a_business_key_makes_a_reissued_call_the_same_effect(on_stage: Any) -> None:
    """With `key_fields`, the model asking again under a new call id reaches the recorded
    charge, not a second one."""
    on_stage.key_fields("account", "amount")
    steps = [
        [("charge_card", shop.charge("25.00"), "call_first")],
        [("charge_card", shop.charge("25.00"), "call_again")],
    ]
    done = shop.build(steps).run_sync("Pay, then pay again.")
    first, again = results(done)
    assert first["outcome"] == again["outcome"] == "success"
    assert first["content"] == again["content"]
    assert len(on_stage.charges()) == 1 and shop.RAN == ["charge_card 25.00"]
    [effect] = on_stage.effects("charge_card")
    assert effect.step_id == "turn-1"


def test_the_example_counts_one_charge_and_one_message(stage: Any) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "pydantic_ai" / "agent.py"
    done = stage.run_python(example, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "charges at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert "messages at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert len(stage.payment_intents()) == 1 and len(stage.messages()) == 1
