"""What the model reads when the ledger refuses an Agents SDK call, or its outcome is not known:
the tool's `failure_error_function`, telling the model not to retry (a re-issued call is the
same effect only at the same turn, with the same arguments). What is wrong with the call itself
(no run identity, arguments without a canonical form, the ledger not answering) raises out of
the run instead; the tool body has not run.
"""

from __future__ import annotations

import inspect
from typing import Any

from agents import RunContextWrapper
from agents.tool import ToolErrorFunction

from ledger_client.errors import (
    ApprovalPending,
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    Halted,
    LeaseLost,
    LeaseTooShort,
    LedgerRequestError,
    LedgerUnavailable,
    LimitExceeded,
    NeedsReview,
    NotSent,
    OperatorDecided,
    UsageError,
)
from ledger_client.models import EffectRecord

BEFORE_CALL = "__ledger_before_call__"
"""Marks an error found before anything was written, which fails the run."""


def failure_function(own: ToolErrorFunction | None) -> ToolErrorFunction:
    async def failure(ctx: RunContextWrapper[Any], error: Exception) -> str:
        text = _refusal_text(error)
        if text is not None:
            return text
        if _raises(error):
            raise error
        if own is not None:
            result = own(ctx, error)
            return await result if inspect.isawaitable(result) else result
        if isinstance(error, NotSent):
            return f"Not done, and nothing was sent: {error}. You may correct the call."
        return (
            "The outcome of this call is unknown: the ledger will find out whether it took "
            "place. Do not call the tool again for this action."
        )

    return failure


def _raises(error: Exception) -> bool:
    """What fails the run rather than answering the model: the call is wrong or the ledger
    cannot be asked (no run identity, arguments without a canonical form, no ledger
    configured, the ledger not answering or refusing the request as invalid, a lease
    shorter than the client's `call_timeout`). Nothing was sent."""
    if getattr(error, BEFORE_CALL, False):
        return True
    return isinstance(error, (LedgerUnavailable, LedgerRequestError, LeaseTooShort, UsageError))


def _refusal_text(error: Exception) -> str | None:
    """The model's answer for a ledger's refusal (None for other errors)."""
    not_again = "Do not call the tool again for this action."
    effect = getattr(error, "effect", None)
    named = f" (effect {effect.id})" if isinstance(effect, EffectRecord) else ""
    if isinstance(error, ApprovalPending):
        return (
            f"Not done: it awaits an operator's approval in the ledger (effect "
            f"{error.effect_id}). {not_again} Tell the user it is pending approval."
        )
    if isinstance(error, NeedsReview):
        return (
            f"Not done now: the ledger holds this action{named} as {error.status}; it may "
            f"already have taken place, and the ledger or an operator settles it. {not_again}"
        )
    if isinstance(error, EffectClosed):
        return f"Not done: this action{named} already ended {error.status}. {not_again}"
    if isinstance(error, Halted):
        why = f": {error.halt.reason}" if error.halt is not None else ""
        return f"Not done: an operator halted this tool or run{why}. {not_again}"
    if isinstance(error, LimitExceeded):
        return f"Not done: a limit refused it; it may pass in {error.retry_after} s. {not_again}"
    if isinstance(error, Blocked):
        return f"Not done: it waits for an earlier action to be confirmed. {not_again}"
    if isinstance(error, EffectKeyConflict):
        return "Not done: this action's key was already used with different arguments. " + not_again
    if isinstance(error, (AttemptsExhausted, OperatorDecided)):
        return f"Not done: an operator decides what happens to this action. {not_again}"
    if isinstance(error, LeaseLost):
        return f"The call ran but its outcome was not recorded; the ledger settles it. {not_again}"
    return None
