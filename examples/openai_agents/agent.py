"""An OpenAI Agents SDK agent that pays and sends a receipt, each side effect guarded by the
ledger.

Offline: the model is a scripted `agents.models.interface.Model`, so no API key is needed,
and tracing is off. The agent charges a card at the payments sandbox, then emails the receipt
through the messaging sandbox; then the same run is done again from the start, as a process
that crashed would do it, and nothing happens twice. It ends by counting what the providers
did against what the ledger recorded, and exits non-zero if they differ.

    EFFECT_LEDGER_URL=... EFFECT_LEDGER_API_KEY=... \\
    SANDBOX_PAYMENTS_URL=... SANDBOX_MESSAGING_URL=... python examples/openai_agents/agent.py

Written against openai-agents 0.24.0.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    Usage,
    set_tracing_disabled,
)
from agents.items import TResponseInputItem, TResponseStreamEvent
from ledger_client import current_effect, guarded
from ledger_client.adapters.openai_agents import ledger_run, ledger_run_config, ledger_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

# The closing check every example shares (examples/ledger_counts.py, beside this directory).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ledger_counts import counts_agree
from stripe_payments import charge

set_tracing_disabled(True)


class ScriptedModel(Model):
    """What a model would do: charge, then send the receipt, then say it is done. It reads
    the tool outputs in its input, so a run done again hears the same calls (same call ids)."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **_: Any,
    ) -> ModelResponse:
        outputs = {
            item["call_id"]: item["output"]
            for item in (input if isinstance(input, list) else [])
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }
        if "call_charge" not in outputs:
            charge = {"amount": "25.00", "currency": "EUR", "account": "acct_42"}
            return respond(call("charge_card", charge, "call_charge"))
        if "call_mail" not in outputs:
            paid = ast.literal_eval(str(outputs["call_charge"]))  # the SDK sends str(result)
            receipt = {
                "to": "customer@example.com",
                "subject": "Your receipt",
                "body": f"We charged {paid['amount']} {paid['currency']} (charge {paid['id']}).",
            }
            return respond(call("send_email", receipt, "call_mail"))
        text = ResponseOutputText(
            text="Paid, and the receipt is on its way.",
            type="output_text",
            annotations=[],
            logprobs=[],
        )
        return respond(
            ResponseOutputMessage(
                id="msg_done", type="message", role="assistant", status="completed", content=[text]
            )
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("this scripted model does not stream")


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=call_id,
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


def respond(item: Any) -> ModelResponse:
    return ModelResponse(output=[item], usage=Usage(), response_id=None)


@ledger_tool
@guarded(tool="charge_card", target="{account}")
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge the customer's card.

    Args:
        amount: In major units, such as "25.00".
        currency: ISO 4217 code.
        account: The customer's account.
    """
    effect = current_effect()
    return charge(amount, currency, account, effect.idempotency_key, str(effect.id))


@ledger_tool
@guarded(tool="send_email", target="{to}")
async def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Email the customer.

    Args:
        to: The recipient's address.
        subject: The subject line.
        body: The text.
    """
    # The messaging provider ignores keys; the header only lets this example count its own.
    async with httpx.AsyncClient() as client:
        reply = await client.post(
            f"{os.environ['SANDBOX_MESSAGING_URL']}/messages",
            json={"to": to, "subject": subject, "body": body},
            headers={"Idempotency-Key": current_effect().idempotency_key},
        )
    reply.raise_for_status()
    message: dict[str, Any] = reply.json()
    return message


agent = Agent(
    name="cashier",
    instructions="Charge the customer, then send the receipt.",
    model=ScriptedModel(),
    tools=[charge_card, send_email],
)


def main() -> int:
    run_id = f"example-openai-agents-{uuid.uuid4().hex[:12]}"
    config = ledger_run_config(RunConfig(tracing_disabled=True))
    with ledger_run(run_id):
        result = Runner.run_sync(agent, "Charge the customer.", run_config=config)
        print(f"agent: {result.final_output}")
        # The same run from the start again, as after a crash: both calls replay.
        again = Runner.run_sync(agent, "Charge the customer.", run_config=config)
        print(f"done again: {again.final_output}")

    ok = counts_agree(run_id)
    print(json.dumps({"run_id": run_id, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # an example's failure is a non-zero exit, with the reason
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
