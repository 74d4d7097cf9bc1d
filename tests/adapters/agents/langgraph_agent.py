"""LangGraph agents for the adapter tests: guarded tools over the sandboxes (sync and async), an
unguarded sibling that counts its calls, and, as a script, the agent of the crash test.

    python tests/adapters/agents/langgraph_agent.py start CHECKPOINTS THREAD AMOUNT
    python tests/adapters/agents/langgraph_agent.py resume CHECKPOINTS THREAD AMOUNT

`start` asks the agent to pay AMOUNT; with LG_CRASH_AFTER_CHARGE=1 the charge tool SIGKILLs its
own process right after the sandbox answered, before the guard records the outcome. `resume`
continues the thread from its checkpoint (a SQLite file). Each prints its tool messages.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from ledger_client import current_effect, guarded
from ledger_client.adapters.langgraph import LedgerMiddleware

from tests.adapters.agents.langgraph_model import ScriptedModel, calls

# How often each tool body ran in this process.
CALLS: Counter[str] = Counter()
USER = {"messages": [{"role": "user", "content": "Pay the invoice, then tell Ada."}]}


def _charge_request(amount: str, currency: str, account: str) -> tuple[str, dict[str, Any]]:
    headers = {"Idempotency-Key": current_effect().idempotency_key}
    body = {"amount": amount, "currency": currency, "account": account}
    return os.environ["SANDBOX_PAYMENTS_URL"] + "/charges", {"json": body, "headers": headers}


def _after_charge(response: httpx.Response) -> dict[str, Any]:
    response.raise_for_status()
    if os.environ.get("LG_CRASH_AFTER_CHARGE") == "1":
        os.kill(os.getpid(), signal.SIGKILL)  # the provider committed; the outcome is not recorded
    charge: dict[str, Any] = response.json()
    return charge


@tool
@guarded(tool="charge_card", target="{account}")
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge `amount` (a decimal string) in `currency` to the card on file for `account`."""
    CALLS["charge_card"] += 1
    print("CHARGING", amount, flush=True)
    url, options = _charge_request(amount, currency, account)
    return _after_charge(httpx.post(url, timeout=10, **options))


@tool("charge_card")
@guarded(tool="charge_card", target="{account}")
async def charge_card_async(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge `amount` (a decimal string) in `currency` to the card on file for `account`."""
    CALLS["charge_card"] += 1
    url, options = _charge_request(amount, currency, account)
    async with httpx.AsyncClient(timeout=10) as client:
        return _after_charge(await client.post(url, **options))


@tool
@guarded(tool="send_email", target="{to}")
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Send an email to `to`."""
    CALLS["send_email"] += 1
    url = os.environ["SANDBOX_MESSAGING_URL"] + "/messages"
    response = httpx.post(url, json={"to": to, "subject": subject, "body": body}, timeout=10)
    response.raise_for_status()
    message: dict[str, Any] = response.json()
    return message


@tool
def note(text: str) -> str:
    """Write `text` in the agent's notebook (no side effect anyone else sees)."""
    CALLS["note"] += 1
    return f"noted: {text}"


@tool("note")
async def note_async(text: str) -> str:
    """Write `text` in the agent's notebook (no side effect anyone else sees)."""
    CALLS["note"] += 1
    return f"noted: {text}"


def pay(call_id: str, amount: str, account: str = "acct_1") -> tuple[str, str, dict[str, Any]]:
    """A model's call of charge_card."""
    return call_id, "charge_card", {"amount": amount, "currency": "EUR", "account": account}


def agent(
    turns: list[Any], tools: list[Any], *, checkpointer: Any = None, **middleware: Any
) -> Any:
    """A create_agent graph over the scripted model, with the ledger's middleware."""
    return create_agent(
        ScriptedModel(turns=turns),
        tools,
        middleware=[LedgerMiddleware(**middleware)],
        checkpointer=checkpointer,
    )


def tool_messages(result: dict[str, Any]) -> dict[str, ToolMessage]:
    """The run's tool messages by tool call id."""
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def main(mode: str, checkpoints: str, thread: str, amount: str) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    config = {"configurable": {"thread_id": thread}}
    with SqliteSaver.from_conn_string(checkpoints) as saver:
        graph = agent([calls(pay("call_pay", amount))], [charge_card], checkpointer=saver)
        # "sync": the model's tool calls are on disk before any tool runs (see the docs page).
        result = graph.invoke(USER if mode == "start" else None, config, durability="sync")
    for call_id, message in tool_messages(result).items():
        print(
            "TOOL",
            json.dumps({"id": call_id, "status": message.status, "content": message.content}),
        )


if __name__ == "__main__":
    main(*sys.argv[1:5])
