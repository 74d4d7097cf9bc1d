"""OpenAI Agents SDK adapter: the ledger's guard under a function tool, with the SDK's own
approval interruption answered from the ledger.

Written against openai-agents 0.24.0. Install with the `[openai-agents]` extra.

    from agents import Agent, Runner
    from ledger_client import current_effect, guarded
    from ledger_client.adapters.openai_agents import ledger_run, ledger_run_config, ledger_tool

    @ledger_tool                          # function_tool, plus what the ledger needs
    @guarded(tool="charge_card")
    def charge_card(amount: str, currency: str, account: str) -> dict: ...

    agent = Agent(name="payer", tools=[charge_card], model=...)
    with ledger_run("order-42"):
        result = Runner.run_sync(agent, "Pay 25 EUR", run_config=ledger_run_config())

`ledger_tool` takes the same options as `function_tool` and builds the same tool: its name,
description and `params_json_schema` are those `function_tool` gives the function alone.

Identity. The call is the SDK's `ToolContext.tool_call_id`. The run is not something the SDK
keeps durably in 0.24: a trace id is generated for each `Runner.run` (and there is no trace
at all with tracing disabled), the group, session and conversation ids are not passed to a
`needs_approval` policy, and a `RunState` exists only once the caller saved one, which a crash
may come first. So the caller names the run: `with ledger_run(run_id):` around `Runner.run`,
`run_sync` or a resume, or a `ledger_run_id` attribute (or key) on the run's context object,
which a saved `RunState` carries along. Neither set: `TypeError`, before anything is written.

Approvals. The tool's `needs_approval` asks the ledger: it records the intent without claiming
it, and when the ledger holds it for an operator (four-eyes, `approve_above`) the SDK
interrupts the run (`result.interruptions`; `approval_of(item)` names the effect, its tool,
target and request). It reads the arguments as the call will (defaults applied), and a ledger
it cannot ask is no approval: the call then meets the ledger itself and fails the run. The end
user's `state.approve(item)` only resumes waiting on the ledger (`wait_for_decision`, up to
`operator_wait` seconds): the call runs once an operator approved it in the ledger, ends
`EffectClosed` when one rejected it, and answers "still awaiting" when neither happened in
time. Only an operator approves. The end user's `state.reject(item)` cancels the effect,
through the run config's `tool_error_formatter` (`ledger_run_config`), which the SDK calls for
every rejected call.

Refusals become the tool's output (the SDK's `failure_error_function`), telling the model not
to retry: held for review or in flight, closed, halted, over a limit, blocked, a key conflict,
an outcome that is unknown. Never "please try again": a re-issued call has a new call id,
which without a business key (`key_fields`) is another effect. What is wrong with the call
itself (no run identity, arguments without a canonical form, the ledger not answering) raises
out of the run instead; the tool body has not run.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, get_origin, get_type_hints, overload

from agents import FunctionTool, RunConfig, RunContextWrapper, ToolApprovalItem, function_tool
from agents.function_schema import FuncSchema, function_schema
from agents.run_config import ToolErrorFormatter, ToolErrorFormatterArgs
from agents.tool import ToolErrorFunction
from agents.tool_context import ToolContext

from ledger_client.context import bind_step
from ledger_client.errors import (
    ApprovalPending,
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    Halted,
    LeaseLost,
    LeaseTooShort,
    LedgerClientError,
    LedgerRequestError,
    LedgerUnavailable,
    LimitExceeded,
    NeedsReview,
    NotSent,
    OperatorDecided,
    UsageError,
)
from ledger_client.guard import GuardSpec, register_context_type, request_of
from ledger_client.models import Approval, EffectRecord
from ledger_client.sync import Ledger

__all__ = [
    "DEFAULT_OPERATOR_WAIT",
    "ApprovalPolicy",
    "approval_of",
    "ledger_run",
    "ledger_run_config",
    "ledger_tool",
    "run_id_of",
]

register_context_type(RunContextWrapper)
register_context_type(ToolContext)

log = logging.getLogger(__name__)

ApprovalPolicy = Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]
"""The SDK's `needs_approval` callable: (run context, the call's arguments, call id)."""

DEFAULT_OPERATOR_WAIT = 30.0
"""Seconds a call the end user approved waits on the ledger for the operator's decision."""

_CONTEXT_PARAMETER = "__ledger_tool_context"
_run: ContextVar[str | None] = ContextVar("ledger_openai_agents_run", default=None)


# --- The run identity ------------------------------------------------------------------------


@contextmanager
def ledger_run(run_id: str) -> Iterator[str]:
    """Make `run_id` the ledger's run for the agent runs started (or resumed) in the block. Use
    the same id when the run is done again after a crash: that is what finds its effects."""
    if not isinstance(run_id, str) or not run_id or len(run_id) > 200:
        raise TypeError(f"run_id must be a non-empty string of at most 200 characters: {run_id!r}")
    token = _run.set(run_id)
    try:
        yield run_id
    finally:
        _run.reset(token)


def run_id_of(ctx: RunContextWrapper[Any]) -> str | None:
    """The ledger's run of a call: `ledger_run(...)`'s, else the run context object's
    `ledger_run_id` (an attribute, or a key of a mapping); None when neither is set."""
    explicit = _run.get()
    if explicit is not None:
        return explicit
    context = ctx.context
    if isinstance(context, Mapping):
        value = context.get("ledger_run_id")
    else:
        value = getattr(context, "ledger_run_id", None)
    return value if isinstance(value, str) and value else None


def _required_run_id(ctx: RunContextWrapper[Any], tool: str) -> str:
    run_id = run_id_of(ctx)
    if run_id is None:
        raise TypeError(
            f"No run identity for a call of guarded tool {tool!r}: run the agent inside "
            "`with ledger_run(run_id):`, or give its context a `ledger_run_id`."
        )
    return run_id


# --- The tool --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tool:
    """What the adapter knows of one guarded tool."""

    spec: GuardSpec
    signature: inspect.Signature
    takes_context: bool
    operator_wait: float
    # The tool's parameters as the SDK validates them before it calls the function.
    parameters: FuncSchema | None = None


# The guarded tools by their SDK name, for the rejection formatter (which gets only the name).
_tools: dict[str, _Tool] = {}
# Effects the ledger held when the SDK asked, by (run id, call id): what a rejection cancels,
# and what `approval_of` shows.
_held: dict[tuple[str, str], Approval] = {}


@overload
def ledger_tool(
    func: Callable[..., Any],
    *,
    operator_wait: float = DEFAULT_OPERATOR_WAIT,
    needs_approval: bool | ApprovalPolicy = False,
    failure_error_function: ToolErrorFunction | None = None,
    **function_tool_options: Any,
) -> FunctionTool: ...


@overload
def ledger_tool(
    func: None = None,
    *,
    operator_wait: float = DEFAULT_OPERATOR_WAIT,
    needs_approval: bool | ApprovalPolicy = False,
    failure_error_function: ToolErrorFunction | None = None,
    **function_tool_options: Any,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def ledger_tool(
    func: Callable[..., Any] | None = None,
    *,
    operator_wait: float = DEFAULT_OPERATOR_WAIT,
    needs_approval: bool | ApprovalPolicy = False,
    failure_error_function: ToolErrorFunction | None = None,
    **function_tool_options: Any,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """`function_tool` for a `@guarded` function. The step identity is bound from the call's
    `ToolContext`; `needs_approval` asks the ledger (after your own `needs_approval`, if you
    give one: when it asks the end user, the ledger is asked once they approved); refusals
    and unknown outcomes become a tool output (your `failure_error_function` formats the
    function's other errors). The other options go to `function_tool` unchanged."""

    def build(fn: Callable[..., Any]) -> FunctionTool:
        spec = getattr(fn, "__ledger_guard__", None)
        if not isinstance(spec, GuardSpec):
            raise TypeError(f"ledger_tool takes a @guarded function; {fn!r} is not one")
        signature = inspect.signature(fn)
        known = _Tool(spec, signature, _takes_context(fn, signature), operator_wait)
        wrapper = _with_identity(fn, known)
        known = replace(known, parameters=_parameters(wrapper, function_tool_options))
        tool = function_tool(
            wrapper,
            needs_approval=_approval_policy(known, needs_approval),
            failure_error_function=_failure_function(failure_error_function),
            **function_tool_options,
        )
        tool.on_invoke_tool = _asking_invoker(tool.on_invoke_tool)
        _tools[tool.name] = known
        return tool

    return build(func) if func is not None else build


def _parameters(wrapper: Callable[..., Any], options: Mapping[str, Any]) -> FuncSchema | None:
    """The parameter model `function_tool` builds for the wrapper (None when it cannot)."""
    try:
        return function_schema(
            wrapper,
            docstring_style=options.get("docstring_style"),
            use_docstring_info=options.get("use_docstring_info", True),
        )
    except Exception:  # function_tool raises its own error for the same function
        return None


def _asking_invoker(invoke: Callable[[ToolContext[Any], str], Awaitable[Any]]) -> Any:
    """The tool's invoker, as a plain callable. The SDK (0.24) answers "needs approval" by
    itself, without asking `needs_approval`, when the arguments validate to anything but the
    model's JSON, as an argument left to its default does: the end user would be asked for a
    call the ledger lets through. With its own invoker replaced, the SDK asks the policy, which
    validates the arguments as the call will (`_request`) before it asks the ledger."""

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        return await invoke(ctx, input)

    return on_invoke_tool


def _takes_context(fn: Callable[..., Any], signature: inspect.Signature) -> bool:
    """Does `fn` take the SDK's context first (as `function_tool` decides it)?"""
    params = list(signature.parameters.values())
    if not params:
        return False
    try:
        hints = get_type_hints(fn)
    except Exception:  # an annotation that cannot be resolved: function_tool will say so
        hints = {}
    annotation = hints.get(params[0].name, params[0].annotation)
    origin = get_origin(annotation) or annotation
    return origin is RunContextWrapper or origin is ToolContext


def _with_identity(fn: Callable[..., Any], known: _Tool) -> Callable[..., Any]:
    """`fn` taking the `ToolContext` first (which `function_tool` leaves out of the schema),
    to bind the step identity around the guarded call and wait for an operator's decision
    on a call the end user approved."""
    if inspect.iscoroutinefunction(fn):
        wrapper: Callable[..., Any] = _async_identity(fn, known)
    else:
        wrapper = _sync_identity(fn, known)
    functools.update_wrapper(wrapper, fn)
    if known.takes_context:
        wrapper.__signature__ = known.signature  # type: ignore[attr-defined]
        return wrapper
    context = inspect.Parameter(
        _CONTEXT_PARAMETER, inspect.Parameter.POSITIONAL_ONLY, annotation=ToolContext[Any]
    )
    parameters = [context, *known.signature.parameters.values()]
    wrapper.__signature__ = known.signature.replace(  # type: ignore[attr-defined]
        parameters=parameters
    )
    wrapper.__annotations__ = {_CONTEXT_PARAMETER: ToolContext[Any], **fn.__annotations__}
    return wrapper


def _before_call(
    ctx: object, known: _Tool, args: tuple[Any, ...], kwargs: dict[str, Any], *, sync: bool
) -> str:
    """The run id of a call, once what the guard checks before writing anything holds: a
    `ToolContext`, a run identity, canonical arguments, a target, a ledger. What does not is
    marked, so that it fails the run instead of becoming the model's answer."""
    try:
        if not isinstance(ctx, ToolContext):
            raise TypeError(f"guarded tool {known.spec.tool!r} was called without a ToolContext")
        run_id = _required_run_id(ctx, known.spec.tool)
        known.spec.target_of(request_of(known.signature, args, kwargs))
        known.spec.sync_ledger() if sync else known.spec.async_ledger()
        return run_id
    except (TypeError, RuntimeError) as exc:
        exc.__ledger_before_call__ = True  # type: ignore[union-attr]
        raise


def _end_user_approved(ctx: ToolContext[Any], hold: ApprovalPending) -> bool:
    return bool(hold.effect_id) and ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id) is True


def _sync_identity(fn: Callable[..., Any], known: _Tool) -> Callable[..., Any]:
    def call(ctx: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
        inner = (ctx, *args) if known.takes_context else args
        run_id = _before_call(ctx, known, inner, kwargs, sync=True)
        with bind_step(run_id, ctx.tool_call_id):
            _held.pop((run_id, ctx.tool_call_id), None)
            try:
                return fn(*inner, **kwargs)
            except ApprovalPending as hold:
                if not _end_user_approved(ctx, hold):
                    raise
                ledger = known.spec.sync_ledger()
                decided = ledger.wait_for_decision(hold.effect_id, timeout=known.operator_wait)
                if decided.status == "awaiting_approval":
                    raise
                return fn(*inner, **kwargs)  # approved: claims and runs; rejected: closed

    return call


def _async_identity(fn: Callable[..., Any], known: _Tool) -> Callable[..., Any]:
    async def call(ctx: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
        inner = (ctx, *args) if known.takes_context else args
        run_id = _before_call(ctx, known, inner, kwargs, sync=False)
        with bind_step(run_id, ctx.tool_call_id):
            _held.pop((run_id, ctx.tool_call_id), None)
            try:
                return await fn(*inner, **kwargs)
            except ApprovalPending as hold:
                if not _end_user_approved(ctx, hold):
                    raise
                ledger = known.spec.async_ledger()
                decided = await ledger.wait_for_decision(
                    hold.effect_id, timeout=known.operator_wait
                )
                if decided.status == "awaiting_approval":
                    raise
                return await fn(*inner, **kwargs)

    return call


# --- needs_approval: asked of the ledger ----------------------------------------------------


def _approval_policy(known: _Tool, own: bool | ApprovalPolicy) -> ApprovalPolicy:
    async def needs_approval(
        ctx: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
    ) -> bool:
        request = _request(known, ctx, arguments)
        if await _asks_end_user(own, ctx, arguments, call_id, request):
            return True  # the end user first; once they approve, the call waits on the ledger
        run_id = run_id_of(ctx)
        if request is None or run_id is None:
            return False  # the call itself fails the same way, and fails the run
        try:
            record = await _record_intent(known.spec, run_id, call_id, request)
        except Exception as exc:
            # A ledger that is down or refuses, no ledger configured, a bad target: never an
            # approval for the end user (the SDK makes any exception here one). The call meets
            # the same answer from the guard, which runs nothing without the ledger: a refusal
            # becomes the model's answer, the rest fails the run.
            log.debug("needs_approval of %s left it to the call: %r", known.spec.tool, exc)
            return False
        if record.status != "awaiting_approval":
            return False
        _held[(run_id, call_id)] = Approval.of(record)
        return True

    return needs_approval


def _request(
    known: _Tool, ctx: RunContextWrapper[Any], arguments: dict[str, Any]
) -> dict[str, Any] | None:
    """The request the guard will record for these arguments: validated by the tool's
    parameter model as the SDK validates them before it calls the function (defaults applied,
    values converted), then bound to the function's signature by the guard's own `request_of`.
    None when they do not validate or have no canonical form (the call then fails)."""
    inner = (ctx,) if known.takes_context else ()
    try:
        if known.parameters is None:
            return request_of(known.signature, inner, arguments)
        parsed = known.parameters.params_pydantic_model(**arguments)
        args, kwargs = known.parameters.to_call_args(parsed)
        return request_of(known.signature, (*inner, *args), kwargs)
    except Exception:
        return None


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


async def _record_intent(
    spec: GuardSpec, run_id: str, call_id: str, request: dict[str, Any]
) -> EffectRecord:
    """The intent, recorded without a claim (the ledger answers whether it holds it)."""
    args = (run_id, call_id, spec.tool, spec.target_of(request), request)
    if isinstance(spec.ledger, Ledger):
        return await asyncio.to_thread(spec.ledger.record_intent, *args)
    return await spec.async_ledger().record_intent(*args)


async def _cancel(spec: GuardSpec, effect_id: str, reason: str) -> EffectRecord:
    if isinstance(spec.ledger, Ledger):
        return await asyncio.to_thread(spec.ledger.cancel, effect_id, reason)
    return await spec.async_ledger().cancel(effect_id, reason)


async def _held_effect(known: _Tool, run_id: str, call_id: str) -> str | None:
    """The held effect of a call, when the SDK asked in another process: by the ledger's
    listing of the run's effects of that step."""
    held = _held.pop((run_id, call_id), None)
    if held is not None:
        return held.effect_id
    spec, cursor = known.spec, None
    ledger = spec.ledger if isinstance(spec.ledger, Ledger) else None
    while True:
        if ledger is not None:
            page = await asyncio.to_thread(
                ledger.list_effects, run_id=run_id, step_id=call_id, tool=spec.tool, cursor=cursor
            )
        else:
            page = await spec.async_ledger().list_effects(
                run_id=run_id, step_id=call_id, tool=spec.tool, cursor=cursor
            )
        for record in page.items:
            if record.step_id == call_id and record.status == "awaiting_approval":
                return record.id
        if page.next_cursor is None:
            return None
        cursor = page.next_cursor


def approval_of(item: ToolApprovalItem, run_id: str | None = None) -> Approval | None:
    """What an interruption of a guarded call waits for, to show the end user: the effect the
    ledger holds for an operator (`effect_id`, `tool`, `target`, `request`, `run_id`, `step_id`).
    `run_id` defaults to `ledger_run(...)`'s; without either, the call id alone finds it when
    no other run has the same. None for an interruption your own `needs_approval` asked for,
    once the call ran, and in another process than the one that ran the agent (there, look it
    up with `list_effects(run_id=..., step_id=item.call_id)`)."""
    call_id = item.call_id
    if call_id is None:
        return None
    run = run_id or _run.get()
    if run is not None:
        return _held.get((run, call_id))
    found = [held for (_, call), held in list(_held.items()) if call == call_id]
    return found[0] if len(found) == 1 else None


# --- state.reject: the effect is cancelled ---------------------------------------------------


def ledger_run_config(base: RunConfig | None = None) -> RunConfig:
    """`base` (or a default `RunConfig`) whose `tool_error_formatter` cancels, in the ledger,
    the effect of a guarded call the end user rejected (`state.reject(item)`). The model then
    reads what `base`'s own formatter says, or the SDK's default rejection message. A
    `rejection_message` given to `state.reject` replaces the formatter in the SDK, so give the
    model's text through a formatter in `base` instead."""
    base = base or RunConfig()
    return replace(base, tool_error_formatter=_cancelling(base.tool_error_formatter))


def _cancelling(then: ToolErrorFormatter | None) -> ToolErrorFormatter:
    async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        known = _tools.get(args.tool_name)
        if args.kind == "approval_rejected" and known is not None:
            await _cancel_rejected(known, args)
        if then is None:
            return None
        message = then(args)
        return await message if inspect.isawaitable(message) else message

    return formatter


async def _cancel_rejected(known: _Tool, args: ToolErrorFormatterArgs[Any]) -> None:
    run_id = run_id_of(args.run_context)
    if run_id is None:
        log.warning("A rejected call of %s has no run identity; nothing cancelled.", args.tool_name)
        return
    try:
        effect_id = await _held_effect(known, run_id, args.call_id)
        if effect_id is not None:
            reason = "rejected by the agent's user (the SDK's state.reject)"
            await _cancel(known.spec, effect_id, reason)
    except LedgerClientError as exc:
        # The SDK swallows a formatter's exception; say what was not done.
        log.warning("The effect of rejected call %s was not cancelled: %s", args.call_id, exc)


# --- Refusals become the tool's output -------------------------------------------------------


def _failure_function(own: ToolErrorFunction | None) -> ToolErrorFunction:
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
    if getattr(error, "__ledger_before_call__", False):
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
