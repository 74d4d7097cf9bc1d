"""A shop agent on Pydantic AI (pydantic-ai-slim 2.68.0) with a scripted `FunctionModel`: no
API key, no network beyond the ledger and the sandboxes. The adapter's tests build it in
process, and `pydantic_ai_agent.py` runs it as a process of its own (the crash test kills it).

The model answers from a script: step `n` of the script is the list of tool calls it makes in
its `n`-th response with calls; once the script is done it answers with the tool results it
saw, as JSON. `charge_card` goes to the payments sandbox with the effect's idempotency key.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Literal

import httpx
from ledger_client import current_effect, guarded
from ledger_client.adapters.pydantic_ai import LedgerCapability
from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

Flavour = Literal["sync", "async"]
Call = tuple[str, dict[str, Any], str]  # tool name, arguments, call id

# Set in a test process to stop the charge between the provider's answer and the outcome.
HANG_AFTER_CHARGE = "PA_TEST_HANG_AFTER_CHARGE"
RAN: list[str] = []  # tool bodies that ran in this process, in order


def charge(amount: str, currency: str = "EUR", account: str = "acct_1") -> dict[str, Any]:
    return {"amount": amount, "currency": currency, "account": account}


def script_model(steps: Sequence[Sequence[Call]]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        made = sum(1 for m in messages if isinstance(m, ModelResponse) and m.tool_calls)
        if made < len(steps):
            return ModelResponse(
                parts=[
                    ToolCallPart(name, args, tool_call_id=cid) for name, args, cid in steps[made]
                ]
            )
        return ModelResponse(parts=[TextPart(json.dumps(tool_results(messages)))])

    return FunctionModel(respond)


def tool_results(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    return [
        {"tool": p.tool_name, "call": p.tool_call_id, "outcome": p.outcome, "content": p.content}
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


def _charged(reply: httpx.Response) -> dict[str, Any]:
    reply.raise_for_status()
    body: dict[str, Any] = reply.json()
    RAN.append(f"charge_card {body['amount']}")
    if os.environ.get(HANG_AFTER_CHARGE):
        print(f"CHARGED {current_effect().id}", flush=True)
        time.sleep(120)  # the test SIGKILLs us here: committed, outcome not recorded
    return body


def _payments() -> str:
    return os.environ["SANDBOX_PAYMENTS_URL"]


def build(
    steps: Sequence[Sequence[Call]],
    *,
    flavour: Flavour = "sync",
    with_ctx: bool = False,
    capability: LedgerCapability | None = None,
) -> Agent[None, str | DeferredToolRequests]:
    """The shop agent: `charge_card` guarded, sync or async, with or without a `RunContext`
    parameter; `capability=None` builds one with the defaults."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        script_model(steps),
        capabilities=[capability if capability is not None else LedgerCapability()],
        output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
    )
    register_charge(agent, flavour=flavour, with_ctx=with_ctx)
    return agent


def register_charge(agent: Agent[None, Any], *, flavour: Flavour, with_ctx: bool) -> None:
    if flavour == "sync" and not with_ctx:

        @agent.tool_plain
        @guarded(tool="charge_card", target=lambda args: args["account"])
        def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
            """Charge a card through the payments provider."""
            body = {"amount": amount, "currency": currency, "account": account}
            key = {"Idempotency-Key": current_effect().idempotency_key}
            return _charged(httpx.post(f"{_payments()}/charges", json=body, headers=key))

    elif flavour == "async" and not with_ctx:

        @agent.tool_plain
        @guarded(tool="charge_card", target=lambda args: args["account"])
        async def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
            """Charge a card through the payments provider."""
            body = {"amount": amount, "currency": currency, "account": account}
            key = {"Idempotency-Key": current_effect().idempotency_key}
            async with httpx.AsyncClient() as client:
                reply = await client.post(f"{_payments()}/charges", json=body, headers=key)
            return _charged(reply)

    elif flavour == "sync":

        @agent.tool
        @guarded(tool="charge_card", target=lambda args: args["account"])
        def charge_card(
            ctx: RunContext[None], amount: str, currency: str, account: str
        ) -> dict[str, Any]:
            """Charge a card through the payments provider."""
            body = {"amount": amount, "currency": currency, "account": account}
            key = {"Idempotency-Key": current_effect().idempotency_key}
            return _charged(httpx.post(f"{_payments()}/charges", json=body, headers=key))

    else:

        @agent.tool
        @guarded(tool="charge_card", target=lambda args: args["account"])
        async def charge_card(
            ctx: RunContext[None], amount: str, currency: str, account: str
        ) -> dict[str, Any]:
            """Charge a card through the payments provider."""
            body = {"amount": amount, "currency": currency, "account": account}
            key = {"Idempotency-Key": current_effect().idempotency_key}
            async with httpx.AsyncClient() as client:
                reply = await client.post(f"{_payments()}/charges", json=body, headers=key)
            return _charged(reply)


if __name__ == "__main__":  # pragma: no cover - imported, not run
    sys.exit("run tests/adapters/agents/pydantic_ai_agent.py")
