"""A Pydantic AI agent that pays and sends a receipt, each side effect guarded by the ledger.

Offline: the model is Pydantic AI's own `FunctionModel`, scripted, so no API key is needed.
The agent charges a card at the payments sandbox, then emails the receipt through the
messaging sandbox; then it runs the same conversation again from the model's first call, as a
process that crashed and resumed would, and nothing happens twice. It ends by counting what
the providers did against what the ledger recorded, and exits non-zero if they differ.

    EFFECT_LEDGER_URL=... EFFECT_LEDGER_API_KEY=... \\
    SANDBOX_PAYMENTS_URL=... SANDBOX_MESSAGING_URL=... python examples/pydantic_ai/agent.py

Written against pydantic-ai-slim 2.68.0.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from ledger_client import current_effect, guarded
from ledger_client.adapters.pydantic_ai import LedgerCapability
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

# The closing check every example shares (examples/ledger_counts.py, beside this directory).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ledger_counts import counts_agree
from stripe_payments import charge


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """What a model would do: charge, then send the receipt, then say it is done."""
    returns = [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if not returns:
        charge = {"amount": "25.00", "currency": "EUR", "account": "acct_42"}
        return ModelResponse(
            parts=[ToolCallPart("charge_card", charge, tool_call_id="call_charge")]
        )
    if len(returns) == 1:
        paid = returns[0].content
        receipt = {
            "to": "customer@example.com",
            "subject": "Your receipt",
            "body": f"We charged {paid['amount']} {paid['currency']} (charge {paid['id']}).",
        }
        return ModelResponse(parts=[ToolCallPart("send_email", receipt, tool_call_id="call_mail")])
    return ModelResponse(parts=[TextPart("Paid, and the receipt is on its way.")])


agent = Agent(FunctionModel(scripted_model), capabilities=[LedgerCapability()])


@agent.tool_plain
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


@agent.tool_plain
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


def main() -> int:
    conversation = f"example-pydantic-ai-{uuid.uuid4().hex[:12]}"
    result = agent.run_sync(
        "Charge the customer and send the receipt.", conversation_id=conversation
    )
    print(f"agent: {result.output}")

    # The same conversation from the model's first call again: both calls replay.
    first_call = result.all_messages()[:2]
    again = agent.run_sync(message_history=first_call)
    print(f"resumed from the first call: {again.output}")

    ok = counts_agree(conversation)
    print(json.dumps({"conversation": conversation, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # an example's failure is a non-zero exit, with the reason
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
