"""The Agents SDK adapter's calls known by position and request (ADR 0018), on the stage: the real
SDK (0.24.0) with its `SQLiteSession`, a scripted model that writes a new call id each time it
is asked, the real ledger and the payments sandbox.

- a turn lost with its session write (what a crash during the call leaves) and asked again: the
  re-issued call is the same effect, one charge, the model told the charge;
- identical calls in one response are distinct effects, and so is the same call a turn later;
- one guarded call is two requests to the ledger (the effect opened by `needs_approval` is the
  one the guard runs under);
- an approval interruption keeps the held effect's position, here and in a fresh process;
- a claim the SDK did not use (a tool guardrail refused the call) is given back.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import ledger_client
import ledger_client.config
import pytest
from agents import (
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    SQLiteSession,
    ToolGuardrailFunctionOutput,
    Usage,
    tool_input_guardrail,
)
from ledger_client import Ledger, guarded, protocol
from ledger_client.adapters import openai_agents_approvals, openai_agents_calls
from ledger_client.adapters import openai_agents_positions as positions
from ledger_client.adapters.openai_agents import (
    approval_of,
    ledger_run,
    ledger_run_config,
    ledger_tool,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.adapters.agents.openai_agents_shop import post_charge

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = ledger_run_config(RunConfig(tracing_disabled=True))


def payment(amount: str) -> dict[str, str]:
    return {"amount": amount, "currency": "EUR", "account": "acct_1"}


def _outputs(items: list[Any]) -> list[str]:
    return [str(i["output"]) for i in items if i.get("type") == "function_call_output"]


class FreshIds(Model):
    """Makes each turn's calls (tool name, arguments) under new call ids each time it is asked,
    as a real model does; the turn is the first whose calls have not all been answered."""

    def __init__(self, *turns: list[tuple[str, dict[str, str]]]) -> None:
        self.turns = turns

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        answered = len(_outputs(input if isinstance(input, list) else []))
        made = 0
        for turn in self.turns:
            made += len(turn)
            if answered < made:
                return ModelResponse(
                    output=[_call(*call) for call in turn], usage=Usage(), response_id=None
                )
        text = ResponseOutputText(text="done", type="output_text", annotations=[], logprobs=[])
        done = ResponseOutputMessage(
            id="msg_1", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[done], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _call(name: str, arguments: dict[str, str]) -> ResponseFunctionToolCall:
    call_id = f"call_{uuid.uuid4().hex[:10]}"
    return ResponseFunctionToolCall(
        id=call_id,
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


def charging_tool(ledger: Ledger | None = None, **options: Any) -> Any:
    @ledger_tool(operator_wait=1.0, **options)
    @guarded(tool="charge_card", target="{account}", ledger=ledger)
    def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
        """Charge the customer's card."""
        return post_charge(payment(amount) | {"currency": currency, "account": account})

    return charge_card


@pytest.fixture
def on_stage(stage, monkeypatch):
    monkeypatch.setattr(ledger_client.config, "_default", None)
    ledger_client.configure(stage.url, stage.key, owner="openai-agents-test", retries=1)
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    return stage


def converse(agent: Agent[Any], session: SQLiteSession, first: Any, run_id: str = "order-1") -> Any:
    async def run() -> Any:
        with ledger_run(run_id):
            return await Runner.run(agent, first, session=session, run_config=CONFIG)

    return asyncio.run(run())


def items_of(session: SQLiteSession) -> list[Any]:
    return asyncio.run(session.get_items())


def session_holding(folder: Path, name: str, items: list[Any]) -> SQLiteSession:
    """A session holding `items`: the conversation as a crash left it saved."""
    session = SQLiteSession(name, folder / f"{name}.db")
    asyncio.run(session.add_items(items))
    return session


def test_a_turn_lost_with_its_session_write_is_the_same_effect_when_asked_again(on_stage, tmp_path):
    model = FreshIds([("charge_card", payment("25.00"))])
    agent = Agent(name="shop", model=model, tools=[charging_tool()])
    first = SQLiteSession("first", tmp_path / "first.db")
    converse(agent, first, "Pay.")
    saved = items_of(first)
    (charge,) = on_stage.charges()
    (effect,) = on_stage.effects()
    assert (effect.step_id, effect.status) == ("turn-1", "confirmed")

    # The SDK saves a turn once its tools ran: a crash during the charge leaves the user's
    # message alone. Resumed from there, the model re-issues its call under a new id.
    resumed = session_holding(tmp_path, "resumed", saved[:1])
    converse(agent, resumed, [])
    again = items_of(resumed)
    assert _outputs(again) and charge["id"] in _outputs(again)[-1]
    assert [c["id"] for c in on_stage.charges()] == [charge["id"]]
    assert [e.id for e in on_stage.effects()] == [effect.id]
    calls = [i["call_id"] for i in saved + again if i.get("type") == "function_call"]
    assert len(set(calls)) == 2  # two call ids, one effect


def test_identical_calls_in_one_response_and_a_later_turn_are_distinct_effects(on_stage, tmp_path):
    same = ("charge_card", payment("10.00"))
    agent = Agent(name="shop", model=FreshIds([same, same], [same]), tools=[charging_tool()])
    session = SQLiteSession("twice", tmp_path / "twice.db")
    converse(agent, session, "Pay three times.")
    assert sorted(e.step_id for e in on_stage.effects()) == ["turn-1", "turn-1#2", "turn-2"]
    assert len(on_stage.charges()) == 3

    # The second turn lost and asked again: still three effects and three charges.
    saved = items_of(session)
    before_second = [i for i in saved if i.get("role") != "assistant"][:5]
    assert [i.get("type", "message") for i in before_second] == [
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    converse(agent, session_holding(tmp_path, "again", before_second), [])
    assert len(on_stage.effects()) == 3 and len(on_stage.charges()) == 3


def counting_ledger(stage: Any, sent: list[str]) -> Ledger:
    """A ledger client over a real HTTP client that notes each request it sends."""
    http = httpx.Client(
        base_url=stage.url.rstrip("/") + protocol.API_PREFIX,
        headers={"Authorization": f"Bearer {stage.key}"},
        event_hooks={"request": [lambda request: sent.append(request.method)]},
        timeout=10,
    )
    return Ledger(stage.url, stage.key, owner="counted", http=http, retries=1)


def test_one_guarded_call_is_two_requests_to_the_ledger(on_stage, tmp_path):
    sent: list[str] = []
    tool = charging_tool(counting_ledger(on_stage, sent))
    agent = Agent(name="shop", model=FreshIds([("charge_card", payment("25.00"))]), tools=[tool])
    converse(agent, SQLiteSession("count", tmp_path / "count.db"), "Pay.")
    assert sent == ["POST", "POST"]  # the intent with its claim, then the outcome
    (effect,) = on_stage.effects()
    assert effect.status == "confirmed" and len(on_stage.charges()) == 1


@pytest.mark.parametrize("fresh_process", [False, True])
def test_an_interrupted_call_keeps_its_position(on_stage, tmp_path, fresh_process):
    on_stage.hold_above("100.00")
    agent = Agent(
        name="shop", model=FreshIds([("charge_card", payment("250.00"))]), tools=[charging_tool()]
    )
    session = SQLiteSession("held", tmp_path / "held.db")
    result = converse(agent, session, "Pay.")
    (item,) = result.interruptions
    (effect,) = on_stage.effects()
    assert (effect.step_id, effect.status) == ("turn-1", "awaiting_approval")
    approval = approval_of(item, "order-1")
    assert approval is not None and approval.effect_id == str(effect.id)

    on_stage.approve(effect.id)
    state = result.to_state()
    if fresh_process:  # what this process knew of the run, gone
        positions._runs.clear()
        openai_agents_approvals._held.clear()
    state.approve(item)
    resumed = converse(agent, session, state)
    (charge,) = on_stage.charges()
    assert charge["id"] in str(resumed.new_items)
    assert [(e.id, e.status) for e in on_stage.effects()] == [(effect.id, "confirmed")]


@tool_input_guardrail
def refuse_all(data: Any) -> ToolGuardrailFunctionOutput:
    return ToolGuardrailFunctionOutput.reject_content("refused by the shop's guardrail")


def test_a_claim_the_sdk_did_not_use_is_given_back(on_stage, tmp_path, monkeypatch):
    monkeypatch.setattr(openai_agents_calls, "UNUSED_CLAIM_SECONDS", 0.5)
    tool = charging_tool(tool_input_guardrails=[refuse_all])
    agent = Agent(name="shop", model=FreshIds([("charge_card", payment("25.00"))]), tools=[tool])
    result = converse(agent, SQLiteSession("guarded", tmp_path / "guarded.db"), "Pay.")
    assert "refused by the shop's guardrail" in str(result.new_items)
    (effect,) = on_stage.effects()
    for _ in range(50):
        effect.refresh_from_db()
        if effect.status != "dispatching":
            break
        asyncio.run(asyncio.sleep(0.1))
    assert effect.status == "planned" and on_stage.charges() == []


def test_the_model_responses_of_a_conversation_are_its_runs_of_model_items():
    user = {"role": "user", "content": "Pay."}
    call = {"type": "function_call", "call_id": "c1", "name": "charge_card", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    answer = {"type": "message", "role": "assistant", "content": []}
    assert positions.responses_in([]) == 0
    assert positions.responses_in([user]) == 0
    # One response: reasoning and two calls together, then their outputs.
    assert positions.responses_in([user, reasoning, call, call, output, output]) == 1
    assert positions.responses_in([user, call, output, call, output, answer]) == 3
    assert positions.responses_in([user, call, output, answer, user, call]) == 3
