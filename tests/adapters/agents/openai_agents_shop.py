"""A shop agent on the OpenAI Agents SDK (0.24) with guarded tools, and a scripted model.

Run as a script it is the agent process of the crash tests; it reads the stage's environment
(EFFECT_LEDGER_URL, EFFECT_LEDGER_API_KEY, SANDBOX_PAYMENTS_URL, SANDBOX_MESSAGING_URL):

    python openai_agents_shop.py pay RUN_ID CALL_ID AMOUNT
    python openai_agents_shop.py order RUN_ID CALL_ID ORDER_ID AMOUNT

and prints the tool outputs by call id as JSON. With OA_CRASH=after_charge the process kills
itself (SIGKILL) right after the provider answered a charge, before the guard records it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    ToolCallOutputItem,
    Usage,
    set_tracing_disabled,
)
from agents.items import TResponseInputItem, TResponseStreamEvent
from ledger_client import current_effect, guarded
from ledger_client.adapters.openai_agents import ledger_run, ledger_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

set_tracing_disabled(True)
NO_TRACING = RunConfig(tracing_disabled=True)


# --- The scripted model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One function call the model makes."""

    name: str
    arguments: dict[str, Any] | str
    call_id: str


class ScriptedModel(Model):
    """Makes the script's calls, turn by turn, then answers with a text.

    It reads its input rather than counting its own calls: the next turn is the first whose
    calls have no output in the input yet. So a run done again from the start after a crash,
    or resumed from a `RunState`, hears the same calls, with the same call ids."""

    def __init__(self, *turns: list[Call]) -> None:
        self.turns = [list(turn) for turn in turns]

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
        **_: Any,
    ) -> ModelResponse:
        answered = {
            item.get("call_id")
            for item in (input if isinstance(input, list) else [])
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }
        for turn in self.turns:
            if any(call.call_id not in answered for call in turn):
                return ModelResponse(
                    output=[_call(c) for c in turn], usage=Usage(), response_id=None
                )
        return ModelResponse(output=[_text("done")], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model does not stream")


def _call(call: Call) -> ResponseFunctionToolCall:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    return ResponseFunctionToolCall(
        id=call.call_id,
        call_id=call.call_id,
        type="function_call",
        name=call.name,
        arguments=arguments,
    )


def _text(text: str) -> ResponseOutputMessage:
    content = ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])
    return ResponseOutputMessage(
        id="msg_done", type="message", role="assistant", status="completed", content=[content]
    )


def outputs(result: Any) -> dict[str, Any]:
    """The tool outputs of a run result, by call id."""
    found: dict[str, Any] = {}
    for item in result.new_items:
        if isinstance(item, ToolCallOutputItem):
            raw = item.raw_item
            call_id = raw.get("call_id") if isinstance(raw, dict) else raw.call_id
            found[str(call_id)] = item.output
    return found


# --- The tools -----------------------------------------------------------------------------------


def _crash_point() -> None:
    if os.environ.get("OA_CRASH") == "after_charge":
        os.kill(os.getpid(), signal.SIGKILL)


def _charge_body(amount: str, currency: str, account: str, order_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"amount": amount, "currency": currency, "account": account}
    if order_id is not None:
        body["metadata"] = {"order_id": order_id}
    return body


def post_charge(body: dict[str, Any]) -> dict[str, Any]:
    key = current_effect().idempotency_key
    response = httpx.post(
        os.environ["SANDBOX_PAYMENTS_URL"] + "/charges",
        json=body,
        headers={"Idempotency-Key": key},
        timeout=10,
        trust_env=False,
    )
    response.raise_for_status()
    charge: dict[str, Any] = response.json()
    _crash_point()
    return charge


@dataclass
class Tools:
    charge_card: FunctionTool
    pay_async: FunctionTool
    charge_order: FunctionTool
    send_message: FunctionTool
    tag_charge: FunctionTool

    def all(self) -> list[FunctionTool]:
        return [
            self.charge_card,
            self.pay_async,
            self.charge_order,
            self.send_message,
            self.tag_charge,
        ]


def make_tools(operator_wait: float = 30.0, pause_for_review: bool = True) -> Tools:
    """Fresh guarded tools; `operator_wait`: how long an end user's approval waits on the
    ledger for an operator's decision; `pause_for_review`: `ledger_tool`'s."""

    @ledger_tool(operator_wait=operator_wait, pause_for_review=pause_for_review)
    @guarded(tool="charge_card", target="{account}")
    def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
        """Charge the customer's card.

        Args:
            amount: The amount, a decimal string such as "25.00".
            currency: The ISO currency code.
            account: The customer's account.
        """
        return post_charge(_charge_body(amount, currency, account, None))

    @ledger_tool(operator_wait=operator_wait, pause_for_review=pause_for_review)
    @guarded(tool="charge_card", target="{account}")
    async def pay_async(amount: str, currency: str, account: str) -> dict[str, Any]:
        """Charge the customer's card (async)."""
        key = current_effect().idempotency_key
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            response = await http.post(
                os.environ["SANDBOX_PAYMENTS_URL"] + "/charges",
                json=_charge_body(amount, currency, account, None),
                headers={"Idempotency-Key": key},
            )
        response.raise_for_status()
        charge: dict[str, Any] = response.json()
        return charge

    @ledger_tool(operator_wait=operator_wait, pause_for_review=pause_for_review)
    @guarded(tool="charge_card", target="{account}")
    def charge_order(order_id: str, amount: str, currency: str, account: str) -> dict[str, Any]:
        """Charge the customer's card for an order."""
        return post_charge(_charge_body(amount, currency, account, order_id))

    @ledger_tool(operator_wait=operator_wait, pause_for_review=pause_for_review)
    @guarded(tool="send_email", target="{to}")
    def send_message(to: str, subject: str, body: str) -> dict[str, Any]:
        """Send the customer a message."""
        response = httpx.post(
            os.environ["SANDBOX_MESSAGING_URL"] + "/messages",
            json={"to": to, "subject": subject, "body": body},
            timeout=10,
            trust_env=False,
        )
        response.raise_for_status()
        message: dict[str, Any] = response.json()
        return message

    @ledger_tool(operator_wait=operator_wait, pause_for_review=pause_for_review)
    @guarded(tool="charge_card", target="{account}")
    def tag_charge(amount: str, tags: set[str]) -> dict[str, Any]:
        """Charge with tags (a set has no canonical JSON form: the guard refuses it)."""
        raise AssertionError("the body of a call the guard refused must not run")

    return Tools(charge_card, pay_async, charge_order, send_message, tag_charge)


def shop_agent(model: Model, tools: Tools) -> Agent[Any]:
    return Agent(name="shop", instructions="Pay and tell.", model=model, tools=tools.all())


# --- As the agent process of the crash tests -----------------------------------------------------


def main(argv: list[str]) -> int:
    kind, run_id, call_id, *rest = argv
    if kind == "pay":
        (amount,) = rest
        call = Call(
            "charge_card", {"amount": amount, "currency": "EUR", "account": "acct_1"}, call_id
        )
    else:
        order_id, amount = rest
        arguments = {"order_id": order_id, "amount": amount, "currency": "EUR", "account": "acct_1"}
        call = Call("charge_order", arguments, call_id)
    agent = shop_agent(ScriptedModel([call]), make_tools())
    with ledger_run(run_id):
        result = Runner.run_sync(agent, "Pay the order.", run_config=NO_TRACING)
    print(json.dumps({"outputs": outputs(result), "final": result.final_output}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
