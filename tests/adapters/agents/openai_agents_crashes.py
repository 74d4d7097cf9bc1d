"""The OpenAI Agents SDK agent of the crash matrix (tests/adapters/test_openai_agents_crashes.py,
`make crashtest-frameworks`): payments, one conversation each, guarded as
docs/frameworks/openai-agents.md shows, each conversation kept in the SDK's own `SQLiteSession`
(which saves a turn's items once its tools ran, so a crash during a call loses the model's
response), and a model that writes a new call id each time it is asked, as real models do.

    python tests/adapters/agents/openai_agents_crashes.py SESSIONS FIRST COUNT

Runs payments FIRST … FIRST+COUNT-1 (conversation `pay-<i>`, account `acct_<i>`): each that has
not ended yet is started, or, if its session holds anything, resumed as the page says, from the
session with no new input, four at a time (asyncio tasks). With OA_KILL_P=p the process SIGKILLs
itself, with probability p at each place, before the charge is sent, while it is in flight, and
after the provider answered (before the guard records the outcome). Prints `DONE <conversation>`
as each ends.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    SQLiteSession,
    Usage,
    set_tracing_disabled,
)
from agents.items import TResponseInputItem, TResponseStreamEvent
from ledger_client import guarded
from ledger_client.adapters.openai_agents import ledger_run, ledger_run_config, ledger_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.adapters.agents import crash_points

set_tracing_disabled(True)
KILL_P = float(os.environ.get("OA_KILL_P", "0"))


@ledger_tool
@guarded(tool="charge_card", target="{account}")
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge `amount` (a decimal string) in `currency` to the card on file for `account`."""
    return crash_points.charge(amount, currency, account, KILL_P)


def payment(index: int) -> dict[str, Any]:
    return {"amount": f"{index + 1}.00", "currency": "EUR", "account": f"acct_{index}"}


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def outputs(items: list[Any]) -> list[str]:
    """The tool outputs the model was given, in order."""
    return [
        str(_field(item, "output"))
        for item in items
        if _field(item, "type") == "function_call_output"
    ]


def is_result(output: str) -> bool:
    """Whether a tool output is the charge (the SDK gives the model a dict as its `str`),
    rather than a refusal's text."""
    try:
        return isinstance(ast.literal_eval(output), dict)
    except (ValueError, SyntaxError):
        return False


def ended(items: list[Any]) -> bool:
    """The conversation ends with the model's answer after its tool output."""
    return bool(outputs(items)) and _field(items[-1], "role") == "assistant"


class PayingModel(Model):
    """Asked before it saw a tool output, it calls charge_card for the conversation's payment
    with a fresh call id (so a model asked again after a crash re-issues the call under a new
    id); then it answers."""

    def __init__(self, index: int) -> None:
        self.index = index

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        if outputs(input if isinstance(input, list) else []):
            text = ResponseOutputText(text="done", type="output_text", annotations=[], logprobs=[])
            answer = ResponseOutputMessage(
                id="msg_done", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[answer], usage=Usage(), response_id=None)
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        call = ResponseFunctionToolCall(
            id=call_id,
            call_id=call_id,
            type="function_call",
            name="charge_card",
            arguments=json.dumps(payment(self.index)),
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the paying model does not stream")


def conversation(index: int) -> str:
    return f"pay-{index}"


def session(folder: Path, index: int) -> SQLiteSession:
    """The conversation's session, a SQLite file of its own."""
    return SQLiteSession(conversation(index), folder / f"{conversation(index)}.db")


async def pay(folder: Path, index: int) -> None:
    kept = session(folder, index)
    history = await kept.get_items()
    if ended(history):
        return
    agent = Agent(name="payer", instructions="Pay.", model=PayingModel(index), tools=[charge_card])
    config = ledger_run_config(RunConfig(tracing_disabled=True))
    # Resumed as docs/frameworks/openai-agents.md says: the session and no new input.
    start: str | list[TResponseInputItem] = [] if history else "Pay the invoice."
    with ledger_run(conversation(index)):
        await Runner.run(agent, start, session=kept, run_config=config)
    kept.close()
    print("DONE", conversation(index), flush=True)


def _identity_by_call_id() -> None:
    """OA_IDENTITY=call_id: the control run, with calls known by the model's call id as the
    adapter knew them before ADR 0018 (the matrix must then find double charges)."""
    import ledger_client.adapters.openai_agents_positions as positions

    def by_call_id(run_id: str, call_id: str, tool: str, request: Any) -> str:
        return call_id

    positions.call_position = by_call_id  # type: ignore[assignment]


async def main(sessions: str, first: str, count: str) -> None:
    """The payments, OA_CONCURRENCY (4) at a time, as a worker serving several runs."""
    if os.environ.get("OA_IDENTITY") == "call_id":
        _identity_by_call_id()
    folder = Path(sessions)
    folder.mkdir(parents=True, exist_ok=True)
    slots = asyncio.Semaphore(int(os.environ.get("OA_CONCURRENCY", "4")))

    async def one(index: int) -> None:
        async with slots:
            await pay(folder, index)

    indexes = range(int(first), int(first) + int(count))
    await asyncio.gather(*(one(index) for index in indexes))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
