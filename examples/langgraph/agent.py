"""A LangChain agent (`create_agent`, on LangGraph) that pays and sends a receipt, each side
effect guarded by the ledger.

Offline: the model is a scripted LangChain chat model, so no API key is needed. The agent
charges a card at the payments sandbox, then emails the receipt through the messaging
sandbox, with its state checkpointed in SQLite. Then it replays the thread from the checkpoint
taken before the first tool call, as LangGraph does when a run is resumed or replayed from
history: the tools run again with the same call ids, and the ledger answers with what it
recorded. It ends by counting what the providers did against what the ledger recorded, and
exits non-zero if they differ.

    EFFECT_LEDGER_URL=... EFFECT_LEDGER_API_KEY=... \\
    SANDBOX_PAYMENTS_URL=... SANDBOX_MESSAGING_URL=... python examples/langgraph/agent.py

Written against langchain 1.5.2, langgraph 1.2.24 and langgraph-checkpoint-sqlite 3.1.2.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from ledger_client import current_effect, guarded
from ledger_client.adapters.langgraph import LedgerMiddleware

# The closing check every example shares (examples/ledger_counts.py, beside this directory).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ledger_counts import counts_agree
from stripe_payments import charge


class ScriptedModel(BaseChatModel):
    """What a model would do: charge, then send the receipt, then say it is done. It decides
    from the conversation alone, so a resumed or replayed thread gets the same answers."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self  # the script already knows the tools

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        done = [m for m in messages if isinstance(m, ToolMessage)]
        if not done:
            charge = {"amount": "25.00", "currency": "EUR", "account": "acct_42"}
            reply = AIMessage("", tool_calls=[_call("call_charge", "charge_card", charge)])
        elif len(done) == 1:
            paid = json.loads(str(done[0].content))
            receipt = {
                "to": "customer@example.com",
                "subject": "Your receipt",
                "body": f"We charged {paid['amount']} {paid['currency']} (charge {paid['id']}).",
            }
            reply = AIMessage("", tool_calls=[_call("call_mail", "send_email", receipt)])
        else:
            reply = AIMessage("Paid, and the receipt is on its way.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args, "type": "tool_call"}


@tool
@guarded(tool="charge_card", target="{account}")
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge the customer's card `amount` (major units, such as "25.00") in `currency`."""
    effect = current_effect()
    return charge(amount, currency, account, effect.idempotency_key, str(effect.id))


@tool
@guarded(tool="send_email", target="{to}")
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Email the customer."""
    # The messaging provider ignores keys; the header only lets this example count its own.
    reply = httpx.post(
        f"{os.environ['SANDBOX_MESSAGING_URL']}/messages",
        json={"to": to, "subject": subject, "body": body},
        headers={"Idempotency-Key": current_effect().idempotency_key},
    )
    reply.raise_for_status()
    message: dict[str, Any] = reply.json()
    return message


def run(checkpoints: Path, thread: str) -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    with SqliteSaver.from_conn_string(str(checkpoints)) as saver:
        agent = create_agent(
            ScriptedModel(),
            [charge_card, send_email],
            middleware=[LedgerMiddleware()],
            checkpointer=saver,
        )
        # LangGraph's defaults: the ledger knows each call by its position in the run and its
        # arguments, so no durability setting is needed for a crash to charge once.
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "Charge the customer, send a receipt."}]},
            config,
        )
        print(f"agent: {result['messages'][-1].content}")

        # Replay the thread from the checkpoint before its first tool call: LangGraph runs
        # both tools again, at the same positions, and the ledger replays their results.
        before = next(
            state
            for state in agent.get_state_history(config)
            if state.next == ("tools",)
            and not any(isinstance(m, ToolMessage) for m in state.values["messages"])
        )
        again = agent.invoke(None, before.config)
        print(f"replayed from the checkpoint before the charge: {again['messages'][-1].content}")


def main() -> int:
    thread = f"example-langgraph-{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory() as scratch:
        run(Path(scratch) / "checkpoints.sqlite", thread)

    ok = counts_agree(thread)
    print(json.dumps({"thread": thread, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # an example's failure is a non-zero exit, with the reason
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
