"""What the guarded MCP proxy (`ledger_client.adapters.mcp`) answers by itself, without relaying
the call: a tool result with `isError` and a text saying what the ledger said (held for
approval, in doubt, closed, refused, bad input), and the `_meta` keys of its results."""

from __future__ import annotations

from typing import Any

import mcp_types
from fastmcp.tools.base import ToolResult

from ledger_client.errors import (
    ApprovalPending,
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    EffectRefused,
    Halted,
    LedgerRequestError,
    LedgerUnavailable,
    LimitExceeded,
    NeedsReview,
    OperatorDecided,
)

# What the proxy adds to the `_meta` of the results of guarded tools.
META_EFFECT_ID = "effectledger/effect_id"
META_STATUS = "effectledger/status"
META_REPLAYED = "effectledger/replayed"


class Refusal(Exception):
    """The call is answered by the proxy (an error result), not relayed."""

    def __init__(self, text: str, status: str, effect_id: str = "") -> None:
        super().__init__(text)
        self.text, self.status, self.effect_id = text, status, effect_id

    def result(self) -> ToolResult:
        meta: dict[str, Any] = {META_STATUS: self.status}
        if self.effect_id:
            meta[META_EFFECT_ID] = self.effect_id
        text = mcp_types.TextContent(type="text", text=self.text)
        return ToolResult(content=[text], meta=meta, is_error=True)


def _effect_id(exc: EffectRefused) -> str:
    if isinstance(exc, ApprovalPending) and exc.effect_id:
        return exc.effect_id
    return exc.effect.id if exc.effect is not None else ""


def refusal_of(exc: Exception, tool: str) -> Refusal:
    """What the client is told when the ledger did not let the call run; `exc` itself is
    re-raised when it is nothing the ledger said."""
    if isinstance(exc, TypeError):
        return Refusal(f"bad input for {tool!r}: {exc}. Nothing was run.", "bad_request")
    if isinstance(exc, LedgerUnavailable):
        return Refusal(
            f"the ledger is unavailable, so {tool!r} was not run (nothing was sent upstream); "
            f"try again later. ({exc})",
            "ledger_unavailable",
        )
    if isinstance(exc, LedgerRequestError):
        return Refusal(
            f"the ledger refused the call of {tool!r} ({exc.code}: {exc.detail}); it was not run.",
            "refused",
        )
    if not isinstance(exc, EffectRefused):
        raise exc
    effect_id = _effect_id(exc)
    return Refusal(held_text(exc, effect_id), held_status(exc), effect_id)


def held_text(exc: EffectRefused, effect_id: str) -> str:
    if isinstance(exc, ApprovalPending):
        return (
            f"awaiting approval (effect {effect_id}): an operator must approve this call in the "
            "ledger first. Nothing was run; call again with the same identity once approved."
        )
    if isinstance(exc, NeedsReview):
        return (
            f"needs review (effect {effect_id}, {exc.status}): this call may already have "
            "taken effect, so it is not run again. The ledger's reconciliation or an operator "
            "resolves it; do not retry it under a new identity."
        )
    if isinstance(exc, EffectClosed):
        return (
            f"not run: effect {effect_id} already ended {exc.status} (rejected, cancelled or "
            "failed); it will not run under this identity."
        )
    if isinstance(exc, EffectKeyConflict):
        return f"refused: this identity was already used with other arguments ({exc})."
    if isinstance(exc, LimitExceeded):
        return f"not run: a limit was reached; try again in {exc.retry_after} s ({exc})."
    if isinstance(exc, (Halted, Blocked, AttemptsExhausted, OperatorDecided)):
        return f"not run: {exc}"
    return f"not run: the ledger refused it ({exc})."


_STATUS = {
    EffectKeyConflict: "effect_key_conflict",
    LimitExceeded: "limit_exceeded",
    Halted: "halted",
    Blocked: "blocked",
    AttemptsExhausted: "attempts_exhausted",
    OperatorDecided: "operator_decided",
}


def held_status(exc: EffectRefused) -> str:
    """The `effectledger/status` of a refusal: the effect's status, or what refused it."""
    if isinstance(exc, ApprovalPending):
        return "awaiting_approval"
    if isinstance(exc, (NeedsReview, EffectClosed)):
        return exc.status
    return _STATUS.get(type(exc), "refused")
