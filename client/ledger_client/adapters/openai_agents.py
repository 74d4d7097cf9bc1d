"""OpenAI Agents SDK adapter: the ledger's guard under a function tool, each call known by its
position in the run, with the SDK's own approval interruption answered from the ledger.

Written against openai-agents 0.24.0. Install with the `[openai-agents]` extra.

    from agents import Agent, Runner, SQLiteSession
    from ledger_client import current_effect, guarded
    from ledger_client.adapters.openai_agents import ledger_run, ledger_run_config, ledger_tool

    @ledger_tool                          # function_tool, plus what the ledger needs
    @guarded(tool="charge_card")
    def charge_card(amount: str, currency: str, account: str) -> dict: ...

    agent = Agent(name="payer", tools=[charge_card], model=...)
    session = SQLiteSession("order-42", "conversations.db")
    with ledger_run("order-42"):
        result = Runner.run_sync(agent, "Pay 25 EUR", session=session,
                                 run_config=ledger_run_config())
    # after a crash, the same run resumed from its session, with no new input:
    with ledger_run("order-42"):
        result = Runner.run_sync(agent, [], session=session, run_config=ledger_run_config())

`ledger_tool` takes the same options as `function_tool` and builds the same tool: its name,
description and `params_json_schema` are those `function_tool` gives the function alone.

Identity (ADR 0018). The run is named by the caller: `with ledger_run(run_id):` around
`Runner.run`, `run_sync` or a resume, or a `ledger_run_id` attribute (or key) on the run's
context object, which a saved `RunState` carries along; neither set: `TypeError`, before
anything is written (the SDK keeps no durable run id of its own in 0.24). The call is known by
its position, `turn-<n>` for a call of the conversation's n-th model response (`#k` for the
k-th identical call in it), counted by `ledger_run_config()` in the model's input, and by its
request: a model asked again after a crash re-issues its call under a new call id, at the same
turn, and meets the same effect (`openai_agents_positions`). A run not given
`ledger_run_config()` keys its calls by the SDK's call id, as before, which a crash does not
keep (a warning says so once per tool).

One request before the call. The tool's `needs_approval`, which the SDK asks right before it
runs a call, opens the call's effect: held for an operator (four-eyes, `approve_above`), the
SDK interrupts the run (`result.interruptions`; `approval_of(item)` names the effect); let
through, it is claimed for the call, which runs under it, and the outcome is the second and
last request (`openai_agents_calls`). The end user's `state.approve(item)` only resumes waiting
on the ledger (`wait_for_decision`, up to `operator_wait` seconds); the end user's
`state.reject(item)` cancels the effect, through `ledger_run_config()`'s
`tool_error_formatter` (`openai_agents_approvals`).

In doubt. A call that meets its effect in doubt (its process died during the charge) waits, up
to the guard's `settle_timeout`, for the ledger to settle it, then returns the recorded result
or runs under the same effect. One an operator must decide (a review item is open)
interrupts the run as an approval does; approved once they have decided, the call waits up to
`operator_wait` for the effect to move and goes on with the decision (`pause_for_review=False`:
the model is told it is not known yet). What the ledger refuses, and an outcome still unknown,
become the tool's output telling the model not to retry; what is wrong with the call itself
raises out of the run, the body not run (`openai_agents_replies`).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any, get_origin, get_type_hints, overload

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.function_schema import FuncSchema, function_schema
from agents.tool import ToolErrorFunction
from agents.tool_context import ToolContext

from ledger_client.adapters import openai_agents_approvals as approvals
from ledger_client.adapters import openai_agents_calls as calls
from ledger_client.adapters import openai_agents_positions as positions
from ledger_client.adapters.openai_agents_approvals import (
    ApprovalPolicy,
    approval_of,
    ledger_run_config,
)
from ledger_client.adapters.openai_agents_calls import GuardedTool, Identity
from ledger_client.adapters.openai_agents_positions import ledger_run, run_id_of
from ledger_client.adapters.openai_agents_replies import BEFORE_CALL, failure_function
from ledger_client.context import Handed, handing_over, still_handed
from ledger_client.errors import ApprovalPending, LedgerClientError, NeedsReview
from ledger_client.guard import GuardSpec, register_context_type, request_of

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

DEFAULT_OPERATOR_WAIT = 30.0
"""Seconds a call the end user approved waits on the ledger for the operator's decision."""

_CONTEXT_PARAMETER = "__ledger_tool_context"
log = logging.getLogger(__name__)


# --- The tool --------------------------------------------------------------------------------


@overload
def ledger_tool(
    func: Callable[..., Any],
    *,
    operator_wait: float = DEFAULT_OPERATOR_WAIT,
    pause_for_review: bool = True,
    needs_approval: bool | ApprovalPolicy = False,
    failure_error_function: ToolErrorFunction | None = None,
    **function_tool_options: Any,
) -> FunctionTool: ...


@overload
def ledger_tool(
    func: None = None,
    *,
    operator_wait: float = DEFAULT_OPERATOR_WAIT,
    pause_for_review: bool = True,
    needs_approval: bool | ApprovalPolicy = False,
    failure_error_function: ToolErrorFunction | None = None,
    **function_tool_options: Any,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def ledger_tool(
    func: Callable[..., Any] | None = None,
    *,
    operator_wait: float = DEFAULT_OPERATOR_WAIT,
    pause_for_review: bool = True,
    needs_approval: bool | ApprovalPolicy = False,
    failure_error_function: ToolErrorFunction | None = None,
    **function_tool_options: Any,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """`function_tool` for a `@guarded` function. The step identity is bound from the call's
    `ToolContext`; `needs_approval` asks the ledger (after your own `needs_approval`, if you
    give one: when it asks the end user, the ledger is asked once they approved); refusals
    and unknown outcomes become a tool output (your `failure_error_function` formats the
    function's other errors). `pause_for_review`: interrupt the run for an effect in doubt
    that an operator must decide, as for an approval (else the model is told it is not known
    yet). The other options go to `function_tool` unchanged."""

    def build(fn: Callable[..., Any]) -> FunctionTool:
        spec = getattr(fn, "__ledger_guard__", None)
        if not isinstance(spec, GuardSpec):
            raise TypeError(f"ledger_tool takes a @guarded function; {fn!r} is not one")
        signature = inspect.signature(fn)
        known = GuardedTool(
            spec,
            signature,
            _takes_context(fn, signature),
            _is_async(fn),
            operator_wait,
            pause_for_review=pause_for_review,
        )
        wrapper = _with_identity(fn, known)
        known = replace(known, parameters=_parameters(wrapper, function_tool_options))
        name = function_tool_options.get("name_override") or fn.__name__
        tool = function_tool(
            wrapper,
            needs_approval=approvals.approval_policy(known, needs_approval, name),
            failure_error_function=failure_function(failure_error_function),
            **function_tool_options,
        )
        tool.on_invoke_tool = _asking_invoker(tool.on_invoke_tool, known)
        approvals.tools[tool.name] = known
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


def _asking_invoker(
    invoke: Callable[[ToolContext[Any], str], Awaitable[Any]], known: GuardedTool
) -> Any:
    """The tool's invoker, as a plain callable. The SDK (0.24) answers "needs approval" by
    itself, without asking `needs_approval`, when the arguments validate to anything but the
    model's JSON, as an argument left to its default does: the end user would be asked for a
    call the ledger lets through. With its own invoker replaced, the SDK asks the policy, which
    validates the arguments as the call will (`request_for`) before it asks the ledger. It
    also finds, on the event loop, the position of an approved call interrupted elsewhere."""

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        try:
            await _recall_position(ctx, known, input)
        except LedgerClientError as exc:  # the call meets the ledger itself, and says so
            log.debug("the position of approved call %s was not found: %r", ctx.tool_call_id, exc)
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


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(fn)) or inspect.iscoroutinefunction(fn)


def _with_identity(fn: Callable[..., Any], known: GuardedTool) -> Callable[..., Any]:
    """`fn` taking the `ToolContext` first (which `function_tool` leaves out of the schema),
    to bind the call's identity around the guarded call, hand it the effect `needs_approval`
    opened, and wait for an operator's decision on a call the end user approved."""
    if known.is_async:
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
    ctx: object, known: GuardedTool, args: tuple[Any, ...], kwargs: dict[str, Any], *, sync: bool
) -> tuple[ToolContext[Any], Identity, dict[str, Any]]:
    """The call's context, identity and request, once what the guard checks before writing
    anything holds: a `ToolContext`, a run identity, canonical arguments, a target, a ledger.
    What does not is marked, so that it fails the run instead of becoming the model's answer."""
    try:
        if not isinstance(ctx, ToolContext):
            raise TypeError(f"guarded tool {known.spec.tool!r} was called without a ToolContext")
        run_id = positions.required_run_id(ctx, known.spec.tool)
        request = request_of(known.signature, args, kwargs)
        known.spec.target_of(request)
        known.spec.sync_ledger() if sync else known.spec.async_ledger()
    except (TypeError, RuntimeError) as exc:
        setattr(exc, BEFORE_CALL, True)
        raise
    return ctx, calls.identity_of(run_id, ctx.tool_call_id, known, request), request


def _end_user_approved(ctx: ToolContext[Any], effect_id: str | None) -> bool:
    return bool(effect_id) and ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id) is True


def _reviewed(ctx: ToolContext[Any], known: GuardedTool, effect_id: str) -> bool:
    """Did the run stop for an operator's review of this call's effect, and the end user
    answer the interruption (`state.approve`)?"""
    return known.pause_for_review and _end_user_approved(ctx, effect_id)


@contextmanager
def _handing(handed: Handed | None) -> Iterator[None]:
    """The effect opened for the call, handed to its guard; released if the guard took
    another (sync client)."""
    if handed is None:
        yield
        return
    with handing_over(handed):
        try:
            yield
        finally:
            left = still_handed()
            if left is not None:
                calls.release(left.effect)


@asynccontextmanager
async def _ahanding(handed: Handed | None) -> AsyncIterator[None]:
    """`_handing`, for the async client."""
    if handed is None:
        yield
        return
    with handing_over(handed):
        try:
            yield
        finally:
            left = still_handed()
            if left is not None:
                await calls.arelease(left.effect)


def _sync_identity(fn: Callable[..., Any], known: GuardedTool) -> Callable[..., Any]:
    def call(context: object, *args: Any, **kwargs: Any) -> Any:
        inner = (context, *args) if known.takes_context else args
        ctx, identity, _ = _before_call(context, known, inner, kwargs, sync=True)
        approvals.forget_held(identity.run_id, ctx.tool_call_id)
        handed = calls.take_opened(identity.run_id, ctx.tool_call_id)
        with identity.bound(), _handing(handed):
            try:
                return fn(*inner, **kwargs)
            except ApprovalPending as hold:
                if not _end_user_approved(ctx, hold.effect_id):
                    raise
                ledger = known.spec.sync_ledger()
                decided = ledger.wait_for_decision(hold.effect_id, timeout=known.operator_wait)
                if decided.status == "awaiting_approval":
                    raise
                return fn(*inner, **kwargs)  # approved: claims and runs; rejected: closed
            except NeedsReview as held:
                effect = held.effect
                if effect is None or not _reviewed(ctx, known, effect.id):
                    raise
                # The end user answered the interruption: once the operator's decision moves
                # the effect (up to operator_wait), the call goes on with it.
                ledger = known.spec.sync_ledger()
                ledger.wait_for_change(effect.id, status=effect.status, timeout=known.operator_wait)
                return fn(*inner, **kwargs)

    return call


def _async_identity(fn: Callable[..., Any], known: GuardedTool) -> Callable[..., Any]:
    async def call(context: object, *args: Any, **kwargs: Any) -> Any:
        inner = (context, *args) if known.takes_context else args
        ctx, identity, _ = _before_call(context, known, inner, kwargs, sync=False)
        approvals.forget_held(identity.run_id, ctx.tool_call_id)
        handed = calls.take_opened(identity.run_id, ctx.tool_call_id)
        with identity.bound():
            async with _ahanding(handed):
                try:
                    return await fn(*inner, **kwargs)
                except ApprovalPending as hold:
                    if not _end_user_approved(ctx, hold.effect_id):
                        raise
                    ledger = known.spec.async_ledger()
                    decided = await ledger.wait_for_decision(
                        hold.effect_id, timeout=known.operator_wait
                    )
                    if decided.status == "awaiting_approval":
                        raise
                    return await fn(*inner, **kwargs)
                except NeedsReview as held:
                    effect = held.effect
                    if effect is None or not _reviewed(ctx, known, effect.id):
                        raise
                    await known.spec.async_ledger().wait_for_change(
                        effect.id, status=effect.status, timeout=known.operator_wait
                    )
                    return await fn(*inner, **kwargs)

    return call


async def _recall_position(ctx: ToolContext[Any], known: GuardedTool, input: str) -> None:
    """For a call the end user approved after an interruption in another process: the
    position its effect was held at, from the ledger (none is known here)."""
    run_id = run_id_of(ctx)
    call_id = ctx.tool_call_id
    if run_id is None or positions.known_position(run_id, call_id) is not None:
        return
    if ctx.is_tool_approved(ctx.tool_name, call_id) is not True:
        return
    try:
        arguments = json.loads(input) if input else {}
    except ValueError:
        return
    request = calls.request_for(known, ctx, arguments) if isinstance(arguments, dict) else None
    record = await approvals.held_effect(known, run_id, call_id, request)
    if record is not None and record.effect_key.startswith(f"{record.run_id}:{record.step_id}:r"):
        positions.note_position(run_id, call_id, record.step_id)
