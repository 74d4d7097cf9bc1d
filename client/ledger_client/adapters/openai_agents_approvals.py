"""The Agents SDK's approvals answered from the ledger: the tool's `needs_approval` opens the
call's effect (so an effect the ledger holds for an operator interrupts the run, and one it let
through is claimed for the call already), the end user's `state.reject` cancels it, and
`approval_of` shows what an interruption waits for. `ledger_run_config()` installs the
rejection's cancelling and the counting of turns (`openai_agents_positions`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from agents import RunConfig, RunContextWrapper, ToolApprovalItem
from agents.run_config import ToolErrorFormatter, ToolErrorFormatterArgs

from ledger_client.adapters import openai_agents_calls as calls
from ledger_client.adapters import openai_agents_positions as positions
from ledger_client.context import Handed
from ledger_client.errors import ApprovalPending, LedgerClientError, NeedsReview
from ledger_client.models import Approval, EffectRecord
from ledger_client.settling import for_review
from ledger_client.sync import Ledger

log = logging.getLogger("ledger_client.adapters.openai_agents")

ApprovalPolicy = Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]
"""The SDK's `needs_approval` callable: (run context, the call's arguments, call id)."""

# Effects the ledger held when the SDK asked, by (run id, call id): what a rejection cancels,
# and what `approval_of` shows.
_held: dict[tuple[str, str], Approval] = {}
# The guarded tools by their SDK name, for the rejection formatter (which gets only the name).
tools: dict[str, calls.GuardedTool] = {}


def approval_policy(
    known: calls.GuardedTool, own: bool | ApprovalPolicy, tool_name: str
) -> ApprovalPolicy:
    """The tool's `needs_approval`: your own first (when it asks the end user, the ledger is
    asked once they approved), then the ledger, by opening the call's effect."""

    async def needs_approval(
        ctx: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
    ) -> bool:
        request = calls.request_for(known, ctx, arguments)
        run_id = positions.run_id_of(ctx)
        identity = None
        if request is not None and run_id is not None:
            identity = calls.identity_of(run_id, call_id, known, request)
        if await _asks_end_user(own, ctx, arguments, call_id, request):
            return True  # the end user first; once they approve, the call waits on the ledger
        if request is None or identity is None:
            return False  # the call itself fails the same way, and fails the run
        try:
            effect = await _open(known, identity, request, call_id, tool_name)
        except ApprovalPending as hold:
            if hold.approval is None:
                return False
            _held[(identity.run_id, call_id)] = hold.approval
            return True
        except NeedsReview as held:
            if held.effect is None or not await _for_operator(known, held):
                return False  # the guard waits for the ledger to settle it
            _held[(identity.run_id, call_id)] = Approval.of(held.effect)
            return True
        except Exception as exc:
            # A ledger that is down or refuses, an effect in doubt, a bad target: never an
            # approval for the end user (the SDK makes any exception here one). The call meets
            # the same answer from the guard, which settles what is in doubt and runs nothing
            # without the ledger: a refusal becomes the model's answer, the rest fails the run.
            log.debug("needs_approval of %s left it to the call: %r", known.spec.tool, exc)
            return False
        handed = Handed(effect, identity.run_id, identity.step, known.spec.tool, request)
        calls.keep_opened(identity.run_id, call_id, handed)
        return False

    return needs_approval


async def _asks_end_user(
    own: bool | ApprovalPolicy,
    ctx: RunContextWrapper[Any],
    arguments: dict[str, Any],
    call_id: str,
    request: dict[str, Any] | None,
) -> bool:
    """Your own `needs_approval` (a bool, or a callable that may also return a plain bool). A
    callable judges the model's arguments as they are; when validation changes them (a
    default, a conversion), the end user is asked, as the SDK itself would."""
    if not callable(own):
        return own
    if request != arguments:
        return True
    answer: object = own(ctx, arguments, call_id)
    if inspect.isawaitable(answer):
        answer = await answer
    return bool(answer)


async def _open(
    known: calls.GuardedTool,
    identity: calls.Identity,
    request: dict[str, Any],
    call_id: str,
    tool_name: str,
) -> Any:
    """The call's effect, recorded and claimed (or replayed) with the client its guard uses;
    the call id goes with it as the model's output, to find a held effect from another
    process."""
    spec = known.spec
    args = (identity.run_id, identity.step, spec.tool, spec.target_of(request), request)
    output = {"type": "function_call", "call_id": call_id, "name": tool_name}
    options = {**identity.options(), "provenance": {"model_output": output}}
    if not known.is_async:
        return await asyncio.to_thread(spec.sync_ledger().open, *args, **options)
    return await spec.async_ledger().open(*args, **options)


async def _for_operator(known: calls.GuardedTool, held: NeedsReview) -> bool:
    """Does an operator decide this effect in doubt (the ledger's plan for it is `review`)?
    Only then is the run interrupted: what the ledger settles itself, the guard waits for."""
    effect = held.effect
    if not known.pause_for_review or effect is None:
        return False
    spec = known.spec
    if isinstance(spec.ledger, Ledger) or not known.is_async:
        plan = await asyncio.to_thread(spec.sync_ledger().recover, effect.run_id, dry_run=True)
    else:
        plan = await spec.async_ledger().recover(effect.run_id, dry_run=True)
    return for_review(plan, effect.id)


# --- Finding a held call's effect from its call id -------------------------------------------


async def _effects(known: calls.GuardedTool, run_id: str, status: str | None) -> list[EffectRecord]:
    """The run's effects of the tool (in `status`, if given), newest first."""
    spec, cursor, found = known.spec, None, []
    ledger = spec.ledger if isinstance(spec.ledger, Ledger) else None
    options: dict[str, Any] = {"run_id": run_id, "tool": spec.tool, "status": status}
    while True:
        if ledger is not None:
            page = await asyncio.to_thread(ledger.list_effects, cursor=cursor, **options)
        else:
            page = await spec.async_ledger().list_effects(cursor=cursor, **options)
        found.extend(page.items)
        if page.next_cursor is None:
            return sorted(found, key=lambda record: record.created_at, reverse=True)
        cursor = page.next_cursor


def _call_id_of(record: EffectRecord) -> object:
    output = record.provenance.model_output
    return output.get("call_id") if isinstance(output, dict) else None


async def held_effect(
    known: calls.GuardedTool, run_id: str, call_id: str, request: dict[str, Any] | None = None
) -> EffectRecord | None:
    """The effect of a call the SDK interrupted, when it asked in another process: the one
    opened under its call id (whatever became of it), else the newest still to run (awaiting
    an operator, or approved by one) with the call's request, or, when the request is not
    known, the only one awaiting approval."""
    effects = await _effects(known, run_id, None)
    mine = [record for record in effects if _call_id_of(record) == call_id]
    to_run = [record for record in effects if record.status in ("awaiting_approval", "planned")]
    if request is not None:
        mine += [record for record in to_run if record.request == request]
    else:
        waiting = [record for record in to_run if record.status == "awaiting_approval"]
        mine += waiting if len(waiting) == 1 else []
    return mine[0] if mine else None


def approval_of(item: ToolApprovalItem, run_id: str | None = None) -> Approval | None:
    """What an interruption of a guarded call waits for, to show the end user: the effect the
    ledger holds for an operator (`effect_id`, `tool`, `target`, `request`, `run_id`, `step_id`).
    `run_id` defaults to `ledger_run(...)`'s; without either, the call id alone finds it when
    no other run has the same. None for an interruption your own `needs_approval` asked for,
    once the call ran, and in another process than the one that ran the agent (there, look it
    up with `list_effects(run_id=..., status="awaiting_approval")`)."""
    call_id = item.call_id
    if call_id is None:
        return None
    run = run_id or positions.block_run_id()
    if run is not None:
        return _held.get((run, call_id))
    found = [held for (_, call), held in list(_held.items()) if call == call_id]
    return found[0] if len(found) == 1 else None


def forget_held(run_id: str, call_id: str) -> None:
    _held.pop((run_id, call_id), None)


# --- state.reject: the effect is cancelled ---------------------------------------------------


def ledger_run_config(base: RunConfig | None = None) -> RunConfig:
    """`base` (or a default `RunConfig`) with what the adapter needs of every run and resume of
    a guarded agent: a `call_model_input_filter` that counts the conversation's model responses
    before `base`'s own filter runs (the position of each call, which survives a crash), and a
    `tool_error_formatter` that cancels, in the ledger, the effect of a guarded call the end
    user rejected (`state.reject(item)`), then says what `base`'s own formatter says (or the
    SDK's default rejection message). A `rejection_message` given to `state.reject` replaces
    the formatter in the SDK, so give the model's text through a formatter in `base`."""
    base = base or RunConfig()
    return replace(
        base,
        tool_error_formatter=_cancelling(base.tool_error_formatter),
        call_model_input_filter=positions.counting_turns(base.call_model_input_filter),
    )


def _cancelling(then: ToolErrorFormatter | None) -> ToolErrorFormatter:
    async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        known = tools.get(args.tool_name)
        if args.kind == "approval_rejected" and known is not None:
            await _cancel_rejected(known, args)
        if then is None:
            return None
        message = then(args)
        return await message if inspect.isawaitable(message) else message

    return formatter


async def _cancel(known: calls.GuardedTool, effect_id: str, reason: str) -> EffectRecord:
    spec = known.spec
    if isinstance(spec.ledger, Ledger):
        return await asyncio.to_thread(spec.ledger.cancel, effect_id, reason)
    return await spec.async_ledger().cancel(effect_id, reason)


async def _cancel_rejected(known: calls.GuardedTool, args: ToolErrorFormatterArgs[Any]) -> None:
    run_id = positions.run_id_of(args.run_context)
    if run_id is None:
        log.warning("A rejected call of %s has no run identity; nothing cancelled.", args.tool_name)
        return
    try:
        held = _held.pop((run_id, args.call_id), None)
        if held is not None and held.status not in ("awaiting_approval", "planned"):
            # In doubt, for an operator to decide: it may have happened, so it is not
            # cancelled; the model is told what the rejection formatter says.
            log.info("Rejected call %s: effect %s stays for the operator", args.call_id, held)
            return
        effect_id = held.effect_id if held is not None else None
        if effect_id is None:
            record = await held_effect(known, run_id, args.call_id)
            effect_id = record.id if record is not None else None
        if effect_id is not None:
            reason = "rejected by the agent's user (the SDK's state.reject)"
            await _cancel(known, effect_id, reason)
    except LedgerClientError as exc:
        # The SDK swallows a formatter's exception; say what was not done.
        log.warning("The effect of rejected call %s was not cancelled: %s", args.call_id, exc)
