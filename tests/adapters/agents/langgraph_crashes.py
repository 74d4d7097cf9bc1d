"""The LangGraph agent of the crash matrix (tests/adapters/test_langgraph_crashes.py, `make
crashtest-frameworks`): payments, one thread each, guarded as docs/frameworks/langgraph.md
shows and run under LangGraph's defaults (durability "async": a step's checkpoint is written
while the next step runs), with a checkpointer whose writes take 20 ms, as a database across a
network does, and a model that writes a new call id each time it is asked, as real models do.

    python tests/adapters/agents/langgraph_crashes.py CHECKPOINTS FIRST COUNT

Runs payments FIRST … FIRST+COUNT-1 (thread `pay-<i>`, account `acct_<i>`): each that has not
ended yet is started, or, if its thread has a checkpoint, resumed with LangGraph's own
`invoke(None, config)` and nothing else, four at a time. With LG_KILL_P=p the process SIGKILLs
itself, with probability p at each place, before the charge is sent, while it is in flight, and
after the provider answered (before the guard records the outcome). Prints `DONE <thread>` as
each ends. With LG_WAIT=1 the guard waits out holds (the statement corner).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from ledger_client import guarded
from ledger_client.adapters.langgraph import LedgerMiddleware

from tests.adapters.agents import crash_points
from tests.adapters.agents.langgraph_model import ScriptedModel

KILL_P = float(os.environ.get("LG_KILL_P", "0"))
WRITE_SECONDS = 0.02
# LG_WAIT=1: the guard waits out an effect left to a review (`wait=True`), as a provider known
# only by its statements needs: the statement's import settles it while the thread waits.
WAIT = os.environ.get("LG_WAIT") == "1"


@tool
@guarded(tool="charge_card", target="{account}", wait=WAIT)
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge `amount` (a decimal string) in `currency` to the card on file for `account`."""
    return crash_points.charge(amount, currency, account, KILL_P)


class ReissuingModel(ScriptedModel):
    """Asked first, it calls charge_card for the thread's payment with a fresh call id (so a
    model asked again after a crash re-issues the call under a new id); then it answers."""

    payment: dict[str, Any]

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        if any(isinstance(message, AIMessage) for message in messages):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])
        call = {
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "name": "charge_card",
            "args": self.payment,
            "type": "tool_call",
        }
        message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


class DistantSaver(SqliteSaver):
    """SQLite checkpoints whose writes take as long as a database's across a network."""

    def put(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(WRITE_SECONDS)
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(WRITE_SECONDS)
        return super().put_writes(*args, **kwargs)


def payment(index: int) -> dict[str, Any]:
    return {"amount": f"{index + 1}.00", "currency": "EUR", "account": f"acct_{index}"}


def graph(saver: Any, index: int) -> Any:
    model = ReissuingModel(turns=[], payment=payment(index))
    return create_agent(model, [charge_card], middleware=[LedgerMiddleware()], checkpointer=saver)


def config(index: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"pay-{index}"}}


def ended(state: Any) -> bool:
    """The thread's conversation ends with the model's answer after its tool message."""
    messages = (state.values or {}).get("messages") or []
    return len(messages) > 2 and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls


def pay(saver: Any, index: int) -> None:
    agent, where = graph(saver, index), config(index)
    state = agent.get_state(where)
    if ended(state):
        return
    # LangGraph's defaults: no durability argument. A thread with a checkpoint is resumed as
    # LangGraph documents it, with None as the input.
    user = {"messages": [{"role": "user", "content": "Pay the invoice."}]}
    agent.invoke(user if state.created_at is None else None, where)
    print("DONE", where["configurable"]["thread_id"], flush=True)


def _identity_by_call_id() -> None:
    """LG_IDENTITY=call_id: the control run, with calls known by the model's call id as the
    adapter knew them before ADR 0018 (the matrix must then find double charges)."""
    import ledger_client.adapters.langgraph as adapter

    adapter.position_of = lambda request: request.tool_call.get("id")  # type: ignore[assignment]


def main(checkpoints: str, first: str, count: str) -> None:
    """The payments, LG_CONCURRENCY (4) threads at a time, as a worker serving several runs."""
    if os.environ.get("LG_IDENTITY") == "call_id":
        _identity_by_call_id()
    indexes = range(int(first), int(first) + int(count))
    with (
        DistantSaver.from_conn_string(checkpoints) as saver,
        ThreadPoolExecutor(int(os.environ.get("LG_CONCURRENCY", "4"))) as pool,
    ):
        for done in [pool.submit(pay, saver, index) for index in indexes]:
            done.result()


if __name__ == "__main__":
    main(*sys.argv[1:4])
