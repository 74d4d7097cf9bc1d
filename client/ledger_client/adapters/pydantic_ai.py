"""Pydantic AI adapter: the ledger's guard through the framework's toolset wrapping.

Written against pydantic-ai-slim 2.68.0. Install with the `[pydantic-ai]` extra.

    from pydantic_ai import Agent, DeferredToolRequests
    from ledger_client import guarded
    from ledger_client.adapters.pydantic_ai import LedgerCapability

    agent = Agent(model, capabilities=[LedgerCapability()],
                  output_type=[str, DeferredToolRequests])

    @agent.tool_plain
    @guarded(tool="charge_card")
    def charge_card(amount: str, currency: str, account: str) -> dict: ...

`LedgerCapability` wraps the agent's toolsets in a `LedgerToolset` (a `WrapperToolset`), which
binds the call's position around every tool call (ADR 0018): the run is the conversation
(`RunContext.conversation_id`, which the framework stamps on every message and takes back from
the message history, so a resumed run and a run answering deferred tool calls keep it), the
position is the model response that made the call, `turn-<n>` (the n-th response of the
conversation), with an ordinal for identical calls in one response; the ledger keys the effect
by the position and the call's arguments. So a model asked again after a crash lost its
response, which re-issues the call under a new `tool_call_id`, meets the same effect. Give
`run_id=` a function of the `RunContext` to use another durable identity.

The ledger's holds become the framework's answers:

- awaiting an operator's approval (four-eyes): `ApprovalRequired`, so the run ends with
  `DeferredToolRequests` whose metadata names the effect. The end user's `ToolApproved` only
  resumes waiting for the operator's decision in the ledger (up to `operator_wait` seconds;
  still undecided, the call is deferred again). Only an operator approves. The end user's
  `ToolDenied` cancels the effect.
- in doubt after a crash: the guard waits (its `settle_timeout`) for the ledger to settle it,
  then returns the recorded result or runs the call;
- in doubt, and an operator must decide what it became (a review item is open): deferred as
  well (`ApprovalRequired`, metadata `ledger_status` "review"), until the application answers
  it with `ToolApproved` once the operator has decided; the call then goes on with that
  decision (the recorded result, the call run now, or a failed result), or is deferred again
  while no one has decided (after waiting up to `operator_wait` seconds for them).
  `LedgerCapability(pause_for_review=False)` answers with a failed result instead;
- in flight elsewhere, closed, halted, over a limit, blocked: a failed tool result
  (`ToolFailed`) telling the model not to retry. Never `ModelRetry`: a retried call comes back
  in another response.
- a ledger that does not answer: `LedgerUnavailable` ends the run; the tool was not run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import CallToolsNode, ModelRequestNode, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, ToolFailed
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset

from ledger_client.aio import AsyncLedger
from ledger_client.canonical import canonical
from ledger_client.config import LedgerConfig, default_config
from ledger_client.context import bind_position, ordinal_among
from ledger_client.errors import (
    ApprovalPending,
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    EffectRefused,
    Halted,
    LimitExceeded,
    NeedsReview,
    OperatorDecided,
)
from ledger_client.guard import GuardSpec, register_context_type
from ledger_client.settling import for_review

__all__ = ["LedgerCapability", "LedgerToolset", "RunIdentity", "conversation_run_id"]

register_context_type(RunContext)

RunIdentity = Callable[[RunContext[Any]], "str | None"]
"""Gives the durable run identity of a tool call from its `RunContext` (None: there is none)."""

AdapterLedger = AsyncLedger | LedgerConfig
"""The ledger the adapter itself asks (an operator's decision, a denied call's effect): an
`AsyncLedger` used on one event loop only, or a `LedgerConfig` (one client per loop)."""

DEFAULT_OPERATOR_WAIT = 30.0


def conversation_run_id(ctx: RunContext[Any]) -> str | None:
    """The default run identity: the conversation, which outlives one `Agent.run` call."""
    return ctx.conversation_id


def guard_of(tool: ToolsetTool[Any]) -> GuardSpec | None:
    """The guard of a function tool (through combining toolsets), or None for a tool that has
    none or whose function cannot be seen from here (an MCP tool, a custom toolset)."""
    current: Any = tool
    while getattr(current, "source_tool", None) is not None:
        current = current.source_tool
    held = getattr(current.toolset, "tools", None)
    if not isinstance(held, dict):
        return None
    name = getattr(current, "original_name", None) or current.tool_def.name
    function = getattr(held.get(name), "function", None)
    spec = getattr(function, "__ledger_guard__", None)
    return spec if isinstance(spec, GuardSpec) else None


def _calls_with_id(ctx: RunContext[Any], call_id: str) -> int:
    return sum(
        1
        for message in ctx.messages
        if isinstance(message, ModelResponse)
        for call in message.tool_calls
        if call.tool_call_id == call_id
    )


def _signature(call: Any) -> tuple[str, str]:
    """(tool name, canonical arguments): what makes two calls of one response identical."""
    try:
        args = json.dumps(canonical(call.args_as_dict(), "arguments"), sort_keys=True)
    except (TypeError, ValueError):
        args = repr(call.args)
    return call.tool_name, args


def position_of(messages: Sequence[Any], call_id: str) -> str | None:
    """`turn-<n>` for a call of the conversation's n-th model response, `#k` added for the k-th
    identical call in it; None when no response holds the call."""
    turn = 0
    for message in messages:
        if not isinstance(message, ModelResponse):
            continue
        turn += 1
        calls = list(message.tool_calls)
        ids = [call.tool_call_id for call in calls]
        if call_id in ids:
            signatures = [_signature(call) for call in calls]
            return f"turn-{turn}" + ordinal_among(signatures, ids.index(call_id))
    return None


def _refusal_text(refused: EffectRefused) -> str:
    """What the model reads instead of a result when the ledger holds the effect."""
    effect = f" (effect {refused.effect.id})" if refused.effect is not None else ""
    if isinstance(refused, NeedsReview):
        return (
            f"Outcome not known yet: this action{effect} is {refused.status.replace('_', ' ')} "
            "in the ledger. It may already have happened; the ledger or an operator is "
            "resolving it. Do not retry this call, and do not tell the user it failed."
        )
    if isinstance(refused, EffectClosed):
        why = f"already ended {refused.status}; it was not performed now"
    elif isinstance(refused, Halted):
        why = "is halted by an operator"
    elif isinstance(refused, LimitExceeded):
        why = f"is over a limit; the ledger accepts it again in {refused.retry_after}s"
    elif isinstance(refused, Blocked):
        why = "waits for an earlier action to be confirmed"
    elif isinstance(refused, EffectKeyConflict):
        why = "was already recorded with different arguments"
    elif isinstance(refused, (AttemptsExhausted, OperatorDecided)):
        why = "is now for an operator to decide"
    else:
        why = "was refused"
    return f"The ledger holds this action{effect}: it {why}. Do not retry this call. {refused}"


def _review_metadata(held: NeedsReview) -> dict[str, Any]:
    """What `DeferredToolRequests.metadata` carries for a call an operator must settle."""
    effect = held.effect
    metadata: dict[str, Any] = {
        "ledger_effect_id": effect.id if effect is not None else None,
        "ledger_status": "review",
        "ledger_effect_status": held.status,
        "decided_by": "an operator, in the ledger; answer ToolApproved once they have",
    }
    if effect is not None:
        metadata.update(
            ledger_tool=effect.tool,
            ledger_target=effect.target,
            ledger_request=effect.request if isinstance(effect.request, dict) else None,
        )
    return metadata


def _approval_metadata(hold: ApprovalPending) -> dict[str, Any]:
    """What `DeferredToolRequests.metadata` carries for a call awaiting an operator."""
    metadata: dict[str, Any] = {
        "ledger_effect_id": hold.effect_id,
        "ledger_status": "awaiting_approval",
        "decided_by": "an operator, in the ledger",
    }
    approval = hold.approval
    if approval is not None:
        metadata.update(
            ledger_tool=approval.tool,
            ledger_target=approval.target,
            ledger_request=approval.request if isinstance(approval.request, dict) else None,
        )
    return metadata


@dataclass(kw_only=True)
class LedgerToolset(WrapperToolset[Any]):
    """Runs the wrapped toolset's tools inside their step identity and answers the ledger's
    holds the framework's way (see the module docstring).

    `ledger`: where to wait for an operator's decision (default: the process's configuration).
    `run_id`: the durable run identity (default: the conversation id).
    `operator_wait`: how long an end user's approval waits for the operator, in seconds.
    `pause_for_review`: defer a call whose effect an operator must settle (else a failed
    result)."""

    ledger: AdapterLedger | None = None
    run_id: RunIdentity | None = None
    operator_wait: float = DEFAULT_OPERATOR_WAIT
    pause_for_review: bool = True

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run_id = (self.run_id or conversation_run_id)(ctx)
        call_id = ctx.tool_call_id
        if not run_id or not call_id:
            # No identity to bind: a guarded tool refuses (TypeError), any other runs as is.
            return await self._call_held(name, tool_args, ctx, tool)
        if guard_of(tool) is not None and _calls_with_id(ctx, call_id) > 1:
            raise TypeError(
                f"Tool call id {call_id!r} of {name!r} appears in more than one model response "
                f"of conversation {run_id!r}, so it does not identify one action. Use a model "
                "that issues unique call ids, or give the tool a business key (key_fields)."
            )
        position = position_of(ctx.messages, call_id)
        if position is None:
            return await self._call_held(name, tool_args, ctx, tool)
        with bind_position(run_id, position):
            return await self._call_held(name, tool_args, ctx, tool)

    async def _call_held(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        try:
            try:
                return await self.wrapped.call_tool(name, tool_args, ctx, tool)
            except ApprovalPending as hold:
                if not ctx.tool_call_approved:
                    raise
                # The end user approved: that only resumes waiting for the operator.
                await self._wait_for_operator(hold.effect_id)
                return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except ApprovalPending as hold:
            raise ApprovalRequired(_approval_metadata(hold)) from None
        except NeedsReview as held:
            if not await self._for_operator(held):
                raise ToolFailed(_refusal_text(held)) from None
            return await self._after_review(held, name, tool_args, ctx, tool)
        except EffectRefused as refused:
            raise ToolFailed(_refusal_text(refused)) from None

    async def _for_operator(self, held: NeedsReview) -> bool:
        """Does an operator decide this effect (the ledger's plan for it is `review`)?"""
        effect = held.effect
        if not self.pause_for_review or effect is None:
            return False
        plan = await _client(self.ledger).recover(effect.run_id, dry_run=True)
        return for_review(plan, effect.id)

    async def _after_review(
        self,
        held: NeedsReview,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        """Deferred until the application answers `ToolApproved`; then, once the effect has
        left the state it was held in (waiting up to `operator_wait`), the call again."""
        effect = held.effect
        if not ctx.tool_call_approved or effect is None:
            raise ApprovalRequired(_review_metadata(held))
        if self.operator_wait > 0:
            await _client(self.ledger).wait_for_change(
                effect.id, status=effect.status, timeout=self.operator_wait
            )
        try:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except NeedsReview as still:
            raise ApprovalRequired(_review_metadata(still)) from None
        except EffectRefused as refused:
            raise ToolFailed(_refusal_text(refused)) from None

    async def _wait_for_operator(self, effect_id: str) -> None:
        if self.operator_wait <= 0:
            return
        await _client(self.ledger).wait_for_decision(effect_id, timeout=self.operator_wait)


@dataclass(kw_only=True)
class LedgerCapability(AbstractCapability[Any]):
    """Puts every toolset of the agent under a `LedgerToolset`, and cancels the effect of a
    call the end user denied (`ToolDenied`), which the framework never hands to a toolset."""

    ledger: AdapterLedger | None = None
    run_id: RunIdentity | None = None
    operator_wait: float = DEFAULT_OPERATOR_WAIT
    pause_for_review: bool = True

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # takes a client and a callable: not for agent specs

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        return LedgerToolset(
            toolset,
            ledger=self.ledger,
            run_id=self.run_id,
            operator_wait=self.operator_wait,
            pause_for_review=self.pause_for_review,
        )

    async def after_node_run(self, ctx: RunContext[Any], *, node: Any, result: Any) -> Any:
        if isinstance(node, CallToolsNode):
            denied = _denied_calls(ctx, result)
            run_id = (self.run_id or conversation_run_id)(ctx)
            if denied and run_id:
                await self._cancel_denied(run_id, ctx.messages, denied)
        return result

    async def _cancel_denied(
        self, run_id: str, messages: Sequence[Any], denied: dict[str, str]
    ) -> None:
        """Cancel the held effect of each denied call: the one at its position whose request
        holds the call's arguments (several calls of one response share a position)."""
        ledger = _client(self.ledger)
        for call_id, message in denied.items():
            position, call = position_of(messages, call_id), _call(messages, call_id)
            if position is None or call is None:
                continue
            page = await ledger.list_effects(
                run_id=run_id, step_id=position, status="awaiting_approval"
            )
            for effect in page.items:
                if _holds(effect.request, call.args_as_dict()):
                    reason = f"denied by the agent's user: {message}"
                    await ledger.cancel(effect.id, reason=reason[:500])


def _call(messages: Sequence[Any], call_id: str) -> Any:
    for message in messages:
        if isinstance(message, ModelResponse):
            for call in message.tool_calls:
                if call.tool_call_id == call_id:
                    return call
    return None


def _holds(request: Any, arguments: dict[str, Any]) -> bool:
    """Does the recorded request hold the call's arguments (defaults may add to it)?"""
    try:
        wanted = canonical(arguments, "arguments")
    except TypeError:
        return False
    return (
        isinstance(request, dict)
        and isinstance(wanted, dict)
        and all(request.get(name) == value for name, value in wanted.items())
    )


def _client(given: AdapterLedger | None) -> AsyncLedger:
    """The async client for this event loop: the given one, or the process's configuration's."""
    if isinstance(given, AsyncLedger):
        return given
    return (given or default_config()).for_loop()


def _denied_calls(ctx: RunContext[Any], result: Any) -> dict[str, str]:
    """The calls the tools step just answered with a denial: call id -> the user's message."""
    if isinstance(result, ModelRequestNode):
        request: Any = result.request
    elif ctx.messages and isinstance(ctx.messages[-1], ModelRequest):
        request = ctx.messages[-1]
    else:
        return {}
    return {
        part.tool_call_id: str(part.content)
        for part in request.parts
        if isinstance(part, ToolReturnPart) and part.outcome == "denied"
    }
