"""The shop agent as a process of its own, for the crash test.

    pydantic_ai_agent.py pay AMOUNT HISTORY CONVERSATION   # saves the history after every step
    pydantic_ai_agent.py resume HISTORY                    # continues from the saved history

It reads the ledger and the sandboxes from the environment (EFFECT_LEDGER_URL,
EFFECT_LEDGER_API_KEY, SANDBOX_PAYMENTS_URL) and prints `RESULT <json>` at the end: the run's
output and the tool results it saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from tests.adapters.agents import pydantic_ai_shop as shop

CALL_ID = "call_pay_1"


def _save(path: Path, messages: list[ModelMessage]) -> None:
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))


async def pay(amount: str, history: Path, conversation: str) -> dict[str, Any]:
    agent = shop.build([[("charge_card", shop.charge(amount), CALL_ID)]])
    async with agent.iter("Pay the invoice.", conversation_id=conversation) as run:
        async for _node in run:
            # Saved before each step runs: once the model asked for the charge, the history
            # holds that call, so another process can take the run up from there.
            _save(history, run.all_messages())
        assert run.result is not None
        _save(history, run.result.all_messages())
        return _report(run.result.output, run.result.all_messages())


async def resume(history: Path) -> dict[str, Any]:
    messages = ModelMessagesTypeAdapter.validate_json(history.read_bytes())
    agent = shop.build([[("charge_card", shop.charge("0.00"), CALL_ID)]])
    result = await agent.run(message_history=messages)
    return _report(result.output, result.all_messages())


def _report(output: Any, messages: list[ModelMessage]) -> dict[str, Any]:
    deferred = isinstance(output, DeferredToolRequests)
    return {
        "output": None if deferred else output,
        "deferred": deferred,
        "results": shop.tool_results(messages),
        "conversation": messages[-1].conversation_id if messages else None,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["pay"] and len(argv) == 4:
        report = asyncio.run(pay(argv[1], Path(argv[2]), argv[3]))
    elif argv[:1] == ["resume"] and len(argv) == 2:
        report = asyncio.run(resume(Path(argv[1])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print("RESULT " + json.dumps(report, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
