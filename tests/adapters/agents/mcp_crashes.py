"""The MCP host of the crash matrix (tests/adapters/test_mcp_crashes.py, `make
crashtest-frameworks`): payments, one conversation each, whose tool calls go through the guarded
proxy (`mcp_crash_proxy.py`, which SIGKILLs itself around the charge and is started again by the
test) with the reference SDK's client (`mcp.Client`, mcp 2.3.0, Streamable HTTP, a session per
call), and a model that writes a new call id each time it is asked, as real models do.

    python tests/adapters/agents/mcp_crashes.py CONVERSATIONS PROXY_URL FIRST COUNT

Runs payments FIRST … FIRST+COUNT-1 (run `pay-<i>`, account `acct_<i>`), four at a time. A
conversation is saved after each message (a JSON file each in CONVERSATIONS). When the proxy
dies under a call, the host does what hosts do with a failed tool call: the model is given the
error as the call's result, and, asked again once the proxy answers, re-issues the call under a
new call id (a new JSON-RPC request, in a new session). Prints `DONE <run>` as each ends.

Identity (MCP_IDENTITY): `position` (the default) names the call by the run and the user's turn
it serves (`effectledger/position` = `turn-<n>`), so the ledger keys it by that and its
arguments (ADR 0018); `call_id` sends the model's call id instead (`effectledger/call_id`), the
control, which the matrix must catch.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from ledger_client.adapters.mcp import META_CALL_ID, META_POSITION, META_RUN_ID
from mcp import Client

LOST = "connection lost"  # how a tool result the transport lost begins
Message = dict[str, Any]


def payment(index: int) -> dict[str, Any]:
    return {"amount": f"{index + 1}.00", "currency": "EUR", "account": f"acct_{index}"}


class Conversations:
    """Each conversation's messages, a JSON file per run, rewritten after each message."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def load(self, index: int) -> list[Message]:
        path = self.directory / f"pay-{index}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []

    def save(self, index: int, messages: list[Message]) -> None:
        path = self.directory / f"pay-{index}.json"
        path.with_suffix(".tmp").write_text(json.dumps(messages), encoding="utf-8")
        path.with_suffix(".tmp").replace(path)


def results(messages: list[Message]) -> list[Message]:
    """The tool results the model was given, in order."""
    return [message for message in messages if message["role"] == "tool"]


def ended(messages: list[Message]) -> bool:
    return bool(messages) and messages[-1]["role"] == "assistant" and "call" not in messages[-1]


def model(index: int, messages: list[Message]) -> Message:
    """Before any result, or after one the transport lost, it calls charge_card for the
    conversation's payment with a fresh call id; after any other result it answers."""
    given = results(messages)
    if given and not given[-1]["text"].startswith(LOST):
        return {"role": "assistant", "text": "done"}
    call = {"id": f"call_{uuid.uuid4().hex[:12]}", "name": "charge_card", "args": payment(index)}
    return {"role": "assistant", "call": call}


def identity(index: int, messages: list[Message], call: dict[str, Any]) -> dict[str, Any]:
    """The call's `_meta`: the run, and its position (the user's turn) or the model's call id."""
    meta = {META_RUN_ID: f"pay-{index}"}
    if os.environ.get("MCP_IDENTITY") == "call_id":
        return {**meta, META_CALL_ID: call["id"]}
    turn = sum(message["role"] == "user" for message in messages)
    return {**meta, META_POSITION: f"turn-{turn}"}


def listening(url: str, timeout: float = 120.0) -> None:
    """Until the proxy's port accepts connections again (the test restarts it)."""
    where = urlsplit(url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((where.hostname or "127.0.0.1", where.port or 80)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not come back within {timeout:.0f} s")


async def call_tool(url: str, call: dict[str, Any], meta: dict[str, Any]) -> Message:
    """The call through the proxy, in a session of its own; a lost connection is a result too."""
    try:
        with anyio.fail_after(150):
            async with Client(url, read_timeout_seconds=120) as client:
                result = await client.call_tool(call["name"], call["args"], meta=meta)
    except Exception as exc:  # the proxy died under the call
        await anyio.to_thread.run_sync(listening, url)
        text = f"{LOST}: {type(exc).__name__}: {exc}"[:500]
        return {"role": "tool", "call_id": call["id"], "text": text, "error": True}
    text = " ".join(getattr(block, "text", "") for block in result.content)
    return {"role": "tool", "call_id": call["id"], "text": text, "error": bool(result.is_error)}


async def converse(store: Conversations, url: str, index: int) -> None:
    messages = store.load(index) or [{"role": "user", "text": "Pay the invoice."}]
    while not ended(messages):
        turn = model(index, messages)
        messages.append(turn)
        store.save(index, messages)
        if "call" in turn:
            meta = identity(index, messages, turn["call"])
            messages.append(await call_tool(url, turn["call"], meta))
            store.save(index, messages)
    print("DONE", f"pay-{index}", flush=True)


async def main(directory: str, url: str, first: str, count: str) -> None:
    store, gate = Conversations(directory), asyncio.Semaphore(4)

    async def one(index: int) -> None:
        async with gate:
            await converse(store, url, index)

    indexes = range(int(first), int(first) + int(count))
    await asyncio.gather(*(one(index) for index in indexes))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
