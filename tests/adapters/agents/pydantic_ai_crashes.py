"""The Pydantic AI agent of the crash matrix (tests/adapters/test_pydantic_ai_crashes.py, `make
crashtest-frameworks`): payments, one conversation each, guarded as
docs/frameworks/pydantic-ai.md shows, whose message history is saved after each node
(`agent.iter` and `run.all_messages()`) to a store whose writes land 20 ms after they are sent,
while the run goes on, as a write across a network the agent does not wait for (so a crash can
lose the model's latest response), and a model that writes a new call id each time it is asked,
as real models do.

    python tests/adapters/agents/pydantic_ai_crashes.py HISTORIES FIRST COUNT

Runs payments FIRST … FIRST+COUNT-1 (conversation `pay-<i>`, account `acct_<i>`): each that has
not ended yet is started, or, if its history was saved, resumed as the page says, with the
saved `message_history` and no new prompt, four at a time (asyncio tasks). With PA_KILL_P=p the
process SIGKILLs itself, with probability p at each place, before the charge is sent, while it
is in flight, and after the provider answered (before the guard records the outcome). Prints
`DONE <conversation>` as each ends. With PA_WAIT=1 the guard waits out holds (the statement
corner).
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from ledger_client import guarded
from ledger_client.adapters.pydantic_ai import LedgerCapability
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.adapters.agents import crash_points

KILL_P = float(os.environ.get("PA_KILL_P", "0"))
WRITE_SECONDS = 0.02
# PA_WAIT=1: the guard waits out an effect left to a review (`wait=True`), as a provider known
# only by its statements needs: the statement's import settles it while the call waits.
WAIT = os.environ.get("PA_WAIT") == "1"


@guarded(tool="charge_card", target="{account}", wait=WAIT)
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge `amount` (a decimal string) in `currency` to the card on file for `account`."""
    return crash_points.charge(amount, currency, account, KILL_P)


def payment(index: int) -> dict[str, Any]:
    return {"amount": f"{index + 1}.00", "currency": "EUR", "account": f"acct_{index}"}


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results the model was given, in order."""
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def model(index: int) -> FunctionModel:
    """Asked before it saw a tool result, it calls charge_card for the conversation's payment
    with a fresh call id (so a model asked again after a crash re-issues the call under a new
    id); then it answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if returns(messages):
            return ModelResponse(parts=[TextPart("done")])
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        return ModelResponse(parts=[ToolCallPart("charge_card", payment(index), call_id)])

    return FunctionModel(respond)


def build(index: int) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model(index), capabilities=[LedgerCapability()])
    agent.tool_plain(charge_card)
    return agent


def conversation(index: int) -> str:
    return f"pay-{index}"


class DistantStore:
    """Histories as files, one a conversation, whose writes land WRITE_SECONDS after they are
    sent, in order, while the run goes on."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._last: dict[int, asyncio.Task[None]] = {}

    def path(self, index: int) -> Path:
        return self.folder / f"{conversation(index)}.json"

    def load(self, index: int) -> list[ModelMessage] | None:
        path = self.path(index)
        return ModelMessagesTypeAdapter.validate_json(path.read_bytes()) if path.exists() else None

    def send(self, index: int, messages: list[ModelMessage]) -> None:
        data = ModelMessagesTypeAdapter.dump_json(messages)  # as the messages are now
        self._last[index] = asyncio.create_task(self._write(index, data, self._last.get(index)))

    async def flush(self, index: int) -> None:
        if index in self._last:
            await self._last.pop(index)

    async def _write(self, index: int, data: bytes, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await previous
        await asyncio.sleep(WRITE_SECONDS)
        path = self.path(index)
        temporary = path.with_suffix(".tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)


def ended(messages: list[ModelMessage] | None) -> bool:
    """The conversation ends with the model's answer after its tool result."""
    if not messages or not returns(messages):
        return False
    last = messages[-1]
    return isinstance(last, ModelResponse) and not last.tool_calls


async def pay(store: DistantStore, index: int) -> None:
    history = store.load(index)
    if ended(history):
        return
    agent = build(index)
    # Resumed as docs/frameworks/pydantic-ai.md says: the saved history and no new prompt.
    start: dict[str, Any] = (
        {"user_prompt": "Pay the invoice.", "conversation_id": conversation(index)}
        if not history  # nothing saved yet, or only the empty history before the first node
        else {"message_history": history}
    )
    async with agent.iter(**start) as run:
        async for _node in run:
            store.send(index, run.all_messages())
    assert run.result is not None
    store.send(index, run.result.all_messages())
    await store.flush(index)
    print("DONE", conversation(index), flush=True)


def _identity_by_call_id() -> None:
    """PA_IDENTITY=call_id: the control run, with calls known by the model's call id as the
    adapter knew them before ADR 0018 (the matrix must then find double charges)."""
    import ledger_client.adapters.pydantic_ai as adapter

    adapter.position_of = lambda messages, call_id: call_id  # type: ignore[assignment]


async def main(histories: str, first: str, count: str) -> None:
    """The payments, PA_CONCURRENCY (4) at a time, as a worker serving several runs."""
    if os.environ.get("PA_IDENTITY") == "call_id":
        _identity_by_call_id()
    store = DistantStore(Path(histories))
    store.folder.mkdir(parents=True, exist_ok=True)
    slots = asyncio.Semaphore(int(os.environ.get("PA_CONCURRENCY", "4")))

    async def one(index: int) -> None:
        async with slots:
            await pay(store, index)

    indexes = range(int(first), int(first) + int(count))
    await asyncio.gather(*(one(index) for index in indexes))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
