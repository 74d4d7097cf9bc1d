"""What the LangGraph middleware (`ledger_client.adapters.langgraph`) tells the graph: the
interrupts that show an effect awaiting an operator's approval or decision, how the end user's
answer is read, and the tool messages that tell the model what became of a call it must not
retry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import ToolMessage

from ledger_client.errors import (
    ApprovalPending,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    EffectRefused,
    Halted,
    LimitExceeded,
    NeedsReview,
)
from ledger_client.models import EffectRecord

APPROVE, REJECT = "approve", "reject"


@dataclass(frozen=True)
class Answer:
    """The end user's answer to the approval interrupt."""

    approve: bool
    reason: str


# --- approvals --------------------------------------------------------------------------------


def approval_request(
    request: ToolCallRequest, hold: ApprovalPending, waited: bool = False
) -> dict[str, Any]:
    """What the interrupt shows the end user: the effect and how to answer."""
    effect = hold.effect
    tool = effect.tool if effect is not None else request.tool_call["name"]
    target = effect.target if effect is not None else ""
    amount, currency = _amount(effect)
    what = f"{tool} of {amount} {currency}".rstrip() if amount is not None else tool
    note = "The operator has not decided yet. " if waited else ""
    return {
        "kind": "effect_ledger.approval",
        "effect_id": hold.effect_id,
        "tool": tool,
        "target": target,
        "amount": amount,
        "currency": currency,
        "tool_call_id": request.tool_call.get("id"),
        "message": (
            f"{note}{what} to {target or 'its target'} waits for an operator's approval in the "
            f"ledger (effect {hold.effect_id}). Answer 'approve' to keep waiting for that "
            "decision, or 'reject' to cancel the effect. Only an operator can approve it."
        ),
    }


def _amount(effect: EffectRecord | None) -> tuple[str | None, str | None]:
    request = effect.request if effect is not None else None
    if not isinstance(request, dict):
        return None, None
    amount, currency = request.get("amount"), request.get("currency")
    return (
        None if amount is None else str(amount),
        currency if isinstance(currency, str) else None,
    )


def read_answer(value: Any, hold: ApprovalPending) -> Answer | None:
    """The end user's answer: "approve" / "reject", True / False, or a dict with `decision` (or
    LangChain's `type`), an optional `reason` (or `message`) and an optional `effect_id`. None
    when it does not answer for this effect: the middleware asks again."""
    reason = ""
    if isinstance(value, dict):
        effect_id = value.get("effect_id")
        if effect_id is not None and str(effect_id) != hold.effect_id:
            return None
        reason = str(value.get("reason") or value.get("message") or "")
        value = value.get("decision", value.get("type"))
    if value is True or (isinstance(value, str) and value.lower() in {APPROVE, "approved"}):
        return Answer(approve=True, reason=reason)
    if value is False or (isinstance(value, str) and value.lower() in {REJECT, "rejected"}):
        return Answer(approve=False, reason=reason or "rejected by the agent's user")
    return None


# --- effects an operator decides ---------------------------------------------------------------


def review_request(
    request: ToolCallRequest, refusal: NeedsReview, waited: bool = False
) -> dict[str, Any]:
    """What the interrupt shows while an operator decides what became of an effect in doubt:
    the effect, and that resuming the graph (with any value) goes on with their decision."""
    effect = refusal.effect
    tool = effect.tool if effect is not None else request.tool_call["name"]
    target = effect.target if effect is not None else ""
    effect_id = effect.id if effect is not None else None
    amount, currency = _amount(effect)
    what = f"{tool} of {amount} {currency}".rstrip() if amount is not None else tool
    note = "No operator has decided yet. " if waited else ""
    return {
        "kind": "effect_ledger.review",
        "effect_id": effect_id,
        "status": refusal.status,
        "tool": tool,
        "target": target,
        "amount": amount,
        "currency": currency,
        "tool_call_id": request.tool_call.get("id"),
        "message": (
            f"{note}{what} to {target or 'its target'} is {refusal.status} in the ledger: it "
            f"may already have happened, and an operator decides what it became (effect "
            f"{effect_id}). Resume the graph once they have: it goes on with their decision."
        ),
    }


# --- tool messages ----------------------------------------------------------------------------


def _message(request: ToolCallRequest, text: str) -> ToolMessage:
    return ToolMessage(
        content=text,
        name=request.tool_call["name"],
        tool_call_id=request.tool_call.get("id") or "",
        status="error",
    )


def cancelled_by_user(request: ToolCallRequest, hold: ApprovalPending) -> ToolMessage:
    return _message(
        request,
        f"Not done: the user rejected this call, and effect {hold.effect_id} is cancelled in "
        "the ledger. Do not retry it.",
    )


def rejected_by_operator(request: ToolCallRequest, hold: ApprovalPending) -> ToolMessage:
    return _message(
        request,
        f"Not done: effect {hold.effect_id} was rejected by an operator in the ledger. "
        "Do not retry it.",
    )


def refused(request: ToolCallRequest, refusal: EffectRefused) -> ToolMessage:
    """A tool message for a refusal the model cannot fix by calling again."""
    effect = refusal.effect.id if refusal.effect is not None else None
    which = f"effect {effect}" if effect else "this call"
    if isinstance(refusal, NeedsReview):
        return _message(
            request,
            f"Outcome not known yet: {which} is {refusal.status} in the ledger. It may already "
            "have happened; the ledger or an operator is resolving it. Do not retry this call, "
            "and do not tell the user it failed.",
        )
    elif isinstance(refusal, EffectClosed) and refusal.status == "cancelled":
        why = f"{which} was rejected by an operator or cancelled in the ledger"
    elif isinstance(refusal, EffectClosed):
        why = f"{which} already ended {refusal.status}"
    elif isinstance(refusal, Halted):
        why = f"an operator halted it ({refusal})"
    elif isinstance(refusal, LimitExceeded):
        why = f"a limit refused it for now ({refusal})"
    elif isinstance(refusal, Blocked):
        why = f"it waits for an earlier effect ({refusal})"
    elif isinstance(refusal, EffectKeyConflict):
        why = "the same action was already recorded with different arguments"
    else:
        why = str(refusal)
    return _message(request, f"Not done now: {why}. Do not retry this call.")
