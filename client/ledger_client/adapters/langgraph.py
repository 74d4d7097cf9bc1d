"""LangChain / LangGraph: a tool-call middleware for `create_agent` (and for a `ToolNode`).

    from langchain.agents import create_agent
    from langchain.tools import tool
    from ledger_client import guarded
    from ledger_client.adapters.langgraph import LedgerMiddleware

    @tool
    @guarded(tool="charge_card", target=lambda a: a["account"])
    def charge_card(amount: str, currency: str, account: str) -> dict: ...

    agent = create_agent(model, [charge_card], middleware=[LedgerMiddleware()],
                         checkpointer=checkpointer)

Around each tool call the middleware binds the call's position in the run (the run's
`thread_id` and the model turn that made the call, `tools/turn-3`, which the middleware counts
in the graph's state as each model turn ends), and the ledger keys the effect by that position
and the call's arguments (ADR 0018). So a replayed call, and a call the model re-issues with a
new `tool_call_id` after a crash lost its first answer (LangGraph's default durability saves
the checkpoint after the step), meet their own effect. Resume with LangGraph's own
`invoke(None, config)`: a call whose effect is in doubt waits for the ledger to settle it (the
guard's `settle_timeout`), then returns the recorded result or runs. The ledger's holds become
LangGraph's own: an effect that waits for an operator's approval becomes `interrupt({...})`,
and so does one in doubt that an operator must decide (a review item is open): the graph pauses
until it is resumed, and then goes on with what the operator decided (the recorded result, the
call run now, or a message that it was not done). The end user's answer to the approval
interrupt never approves anything in the ledger: "approve" only waits (`wait_for_decision`) for
the operator, "reject" cancels the effect. With `pause_for_review=False` an effect an operator
must decide becomes a tool message telling the model the outcome is not known yet and not to
retry.

Unguarded tools that share one `ToolNode` task with a guarded call (a plain `ToolNode` runs
every call of a model turn in one task, and LangGraph re-runs the whole task on resume) have
their results remembered in the graph's store, so they do not run twice. `create_agent` gives
every call a task of its own (a `Send` per call), and there nothing needs remembering.
docs/frameworks/langgraph.md explains both, with the LangGraph sources it relies on.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.callbacks import BaseCallbackManager
from langchain_core.messages import AIMessage, ToolMessage, message_to_dict, messages_from_dict
from langchain_core.tools import BaseTool, InjectedToolArg
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt import ToolRuntime
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.types import Command, interrupt

from ledger_client.adapters.langgraph_replies import (
    approval_request,
    cancelled_by_user,
    read_answer,
    refused,
    rejected_by_operator,
    review_request,
)
from ledger_client.aio import AsyncLedger
from ledger_client.canonical import canonical
from ledger_client.context import bind_position, ordinal_among
from ledger_client.errors import (
    ApprovalPending,
    EffectRefused,
    LedgerRequestError,
    NeedsReview,
)
from ledger_client.guard import GuardSpec, register_context_annotation, register_context_type
from ledger_client.models import EffectRecord, RecoveryPlan
from ledger_client.settling import for_review
from ledger_client.sync import Ledger

__all__ = ["REMEMBERED", "LedgerMiddleware", "LedgerState", "approval_request"]

# What LangChain injects into a tool function (a `runtime: ToolRuntime`, an injected store,
# `callbacks`): never part of the request the ledger records.
for _context_type in (ToolRuntime, Runtime, BaseStore, BaseCallbackManager):
    register_context_type(_context_type)
# Parameters LangChain fills in itself (`Annotated[str, InjectedToolCallId]`, `InjectedState`,
# `InjectedStore`): all mark their annotation with a subclass of `InjectedToolArg`.
register_context_annotation(InjectedToolArg)

# The graph store's namespace for unguarded results kept across a task's re-run.
REMEMBERED = ("effect_ledger", "tool_results")
# LangGraph marks a task that a `Send` started (one call per task in `create_agent`).
_PUSH = "__pregel_push"

Result = ToolMessage | Command[Any]
# The calls of one ToolNode task: (event loop, thread, task namespace) and their call ids.
_Group = tuple[tuple[int, str, str], list[str]]
Handler = Callable[[ToolCallRequest], Result]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[Result]]


@dataclass(frozen=True)
class _Step:
    run_id: str | None
    call_id: str | None
    # The call's position in the run (`tools/turn-3`), with an ordinal for identical calls.
    position: str | None = None


class LedgerState(AgentState[Any]):
    """The agent's state with the middleware's count of model turns, private to the graph:
    written in the step after each model call, so it is saved with the model's message or lost
    with it, and a model asked again after a crash makes its calls at the same position."""

    ledger_model_turns: NotRequired[Annotated[int, PrivateStateAttr]]


class LedgerMiddleware(AgentMiddleware[LedgerState, Any, Any]):
    """Binds each tool call's identity and turns the ledger's holds into LangGraph's.

    `ledger` / `async_ledger`: where to wait for decisions and cancel (default: the guard's own
    ledger, else the process default). `approval_wait`: seconds to wait for the operator after
    the end user answered "approve"; if the operator has not decided by then, the graph pauses
    again with a fresh interrupt. `pause_for_review=False` answers the model "not known yet"
    instead of pausing while an operator decides an effect in doubt. `remember_siblings=False`
    turns off the store-backed memory of unguarded results (see the module docstring) and
    accepts that they may run twice.
    """

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        async_ledger: AsyncLedger | None = None,
        approval_wait: float = 30.0,
        pause_for_review: bool = True,
        remember_siblings: bool = True,
    ) -> None:
        super().__init__()
        self.ledger = ledger
        self.async_ledger = async_ledger
        self.approval_wait = approval_wait
        self.pause_for_review = pause_for_review
        self.remember_siblings = remember_siblings
        self._siblings = _Siblings()

    state_schema = LedgerState

    def after_model(self, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return {"ledger_model_turns": state.get("ledger_model_turns", 0) + 1}

    async def aafter_model(
        self, state: LedgerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.after_model(state, runtime)

    # --- sync --------------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> Result:
        spec = guard_of(request.tool)
        step = step_of(request, required=spec is not None)
        with _bound(step, strict=spec is not None):
            if spec is None:
                return self._unguarded(request, handler)
            return self._guarded(request, handler, spec)

    def _guarded(self, request: ToolCallRequest, handler: Handler, spec: GuardSpec) -> Result:
        waited = False
        while True:
            try:
                return handler(request)
            except ApprovalPending as hold:
                if not hold.effect_id:
                    return refused(request, hold)
                settled = self._hold(request, hold, self._sync_ledger(spec))
            except NeedsReview as refusal:
                if not self._for_operator(refusal, self._sync_ledger(spec)):
                    return refused(request, refusal)
                # Paused until resumed; then the guard asks the ledger again.
                interrupt(review_request(request, refusal, waited))
                waited, settled = True, None
            except EffectRefused as refusal:
                return refused(request, refusal)
            if settled is not None:
                return settled
            # An operator approved or decided: the guard asks again, and runs the tool at most
            # once.

    def _for_operator(self, refusal: NeedsReview, ledger: Ledger) -> bool:
        """Does an operator decide this effect (the ledger's plan for it is `review`)?"""
        effect = refusal.effect
        if not self.pause_for_review or effect is None:
            return False
        plan = ledger.recover(effect.run_id, dry_run=True)
        return for_review(plan, effect.id)

    def _hold(
        self, request: ToolCallRequest, hold: ApprovalPending, ledger: Ledger
    ) -> ToolMessage | None:
        waited = False
        while True:
            answer = read_answer(interrupt(approval_request(request, hold, waited)), hold)
            if answer is None:
                continue
            if not answer.approve:
                try:
                    ledger.cancel(hold.effect_id, reason=answer.reason)
                except LedgerRequestError:
                    return None  # no longer cancellable: the guard reads what it became
                return cancelled_by_user(request, hold)
            effect = ledger.wait_for_decision(hold.effect_id, timeout=self.approval_wait)
            if effect.status == "cancelled":
                return rejected_by_operator(request, hold)
            if effect.status != "awaiting_approval":
                return None
            waited = True

    def _unguarded(self, request: ToolCallRequest, handler: Handler) -> Result:
        slot = self._slot(request)
        if slot is None:
            return handler(request)
        store, key = slot
        kept = store.get(REMEMBERED, key)
        if kept is not None:
            return restore(kept.value)
        result = handler(request)
        if isinstance(result, ToolMessage):
            store.put(REMEMBERED, key, keep(result))
        return result

    # --- async -------------------------------------------------------------------------------

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncHandler) -> Result:
        group = self._siblings.join(request)
        try:
            spec = guard_of(request.tool)
            step = step_of(request, required=spec is not None)
            with _bound(step, strict=spec is not None):
                if spec is None:
                    return await self._aunguarded(request, handler)
                return await self._aguarded(request, handler, spec)
        finally:
            self._siblings.leave(group, request)

    async def _aguarded(
        self, request: ToolCallRequest, handler: AsyncHandler, spec: GuardSpec
    ) -> Result:
        waited = False
        while True:
            try:
                return await handler(request)
            except ApprovalPending as hold:
                if not hold.effect_id:
                    return refused(request, hold)
                settled = await self._ahold(request, hold, self._async_ledger(spec))
            except NeedsReview as refusal:
                if not await self._afor_operator(refusal, self._async_ledger(spec)):
                    return refused(request, refusal)
                await self._apause(request, review_request(request, refusal, waited))
                waited, settled = True, None
            except EffectRefused as refusal:
                return refused(request, refusal)
            if settled is not None:
                return settled

    async def _afor_operator(self, refusal: NeedsReview, ledger: AsyncLedger | _Threaded) -> bool:
        effect = refusal.effect
        if not self.pause_for_review or effect is None:
            return False
        plan = await ledger.recover(effect.run_id, dry_run=True)
        return for_review(plan, effect.id)

    async def _apause(self, request: ToolCallRequest, shown: dict[str, Any]) -> Any:
        try:
            return interrupt(shown)
        except GraphInterrupt:
            # asyncio.gather would abandon this ToolNode task's other calls mid-flight.
            await self._siblings.finished(request)
            raise

    async def _ahold(
        self, request: ToolCallRequest, hold: ApprovalPending, ledger: AsyncLedger | _Threaded
    ) -> ToolMessage | None:
        waited = False
        while True:
            value = await self._apause(request, approval_request(request, hold, waited))
            answer = read_answer(value, hold)
            if answer is None:
                continue
            if not answer.approve:
                try:
                    await ledger.cancel(hold.effect_id, reason=answer.reason)
                except LedgerRequestError:
                    return None
                return cancelled_by_user(request, hold)
            effect = await ledger.wait_for_decision(hold.effect_id, timeout=self.approval_wait)
            if effect.status == "cancelled":
                return rejected_by_operator(request, hold)
            if effect.status != "awaiting_approval":
                return None
            waited = True

    async def _aunguarded(self, request: ToolCallRequest, handler: AsyncHandler) -> Result:
        slot = self._slot(request)
        if slot is None:
            return await handler(request)
        store, key = slot
        kept = await store.aget(REMEMBERED, key)
        if kept is not None:
            return restore(kept.value)
        result = await handler(request)
        if isinstance(result, ToolMessage):
            await store.aput(REMEMBERED, key, keep(result))
        return result

    # --- shared ------------------------------------------------------------------------------

    def _sync_ledger(self, spec: GuardSpec) -> Ledger:
        return self.ledger if self.ledger is not None else spec.sync_ledger()

    def _async_ledger(self, spec: GuardSpec) -> AsyncLedger | _Threaded:
        if self.async_ledger is not None:
            return self.async_ledger
        if isinstance(spec.ledger, Ledger):  # a sync tool's own client, on a worker thread
            return _Threaded(spec.ledger)
        return spec.async_ledger()

    def _slot(self, request: ToolCallRequest) -> tuple[BaseStore, str] | None:
        """Where to remember an unguarded result, when the call shares its task with a guarded
        call whose pause would make LangGraph run the whole task again."""
        step = step_of(request, required=False)
        if not self.remember_siblings or step.run_id is None or step.call_id is None:
            return None
        if _pushed(request) or not _guarded_siblings(request):
            return None
        store = request.runtime.store
        if store is None:
            raise TypeError(
                f"Tool call {step.call_id} ({request.tool_call['name']}) runs in one ToolNode "
                "task with a guarded call. If that call pauses for an approval, LangGraph runs "
                "the whole task again on resume and this tool would run twice. Compile the "
                "graph with a store (compile(checkpointer=..., store=...)) so that its result "
                "is remembered, dispatch one call per task with Send as create_agent does, or "
                "pass LedgerMiddleware(remember_siblings=False) to accept the re-run."
            )
        return store, json.dumps([step.run_id, step.call_id])


@dataclass(frozen=True)
class _Threaded:
    """A sync `Ledger`'s calls the async path makes, each on a worker thread."""

    ledger: Ledger

    async def cancel(self, effect_id: str, reason: str = "") -> EffectRecord:
        return await asyncio.to_thread(self.ledger.cancel, effect_id, reason)

    async def wait_for_decision(self, effect_id: str, *, timeout: float) -> EffectRecord:
        return await asyncio.to_thread(
            lambda: self.ledger.wait_for_decision(effect_id, timeout=timeout)
        )

    async def recover(self, run_id: str, *, dry_run: bool = False) -> RecoveryPlan:
        return await asyncio.to_thread(lambda: self.ledger.recover(run_id, dry_run=dry_run))


class _Siblings:
    """The calls one async ToolNode task runs together (`asyncio.gather`, tool_node.py in
    langgraph-prebuilt 1.1.3): when one of them pauses, LangGraph ends the task at once and
    the others would be left mid-flight, or cancelled when the loop closes. A call that pauses
    first waits here until the other calls of its task have finished."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[int, str, str], tuple[dict[str, asyncio.Event], list[int]]] = {}

    def _key(self, request: ToolCallRequest) -> _Group | None:
        if _pushed(request):
            return None
        ids = [str(call.get("id")) for call in _calls_of(request.state)]
        if len(ids) < 2 or request.tool_call.get("id") not in ids:
            return None
        config = request.runtime.config or {}
        thread = str((config.get("configurable") or {}).get("thread_id"))
        namespace = str((config.get("metadata") or {}).get("langgraph_checkpoint_ns", ""))
        return (id(asyncio.get_running_loop()), thread, namespace), ids

    def _events(self, key: tuple[int, str, str], ids: list[str]) -> dict[str, asyncio.Event]:
        with self._lock:
            events, _ = self._groups.setdefault(key, ({}, [len(ids)]))
            for call_id in ids:
                events.setdefault(call_id, asyncio.Event())
            return events

    def join(self, request: ToolCallRequest) -> _Group | None:
        group = self._key(request)
        if group is not None:
            self._events(*group)
        return group

    def leave(self, group: _Group | None, request: ToolCallRequest) -> None:
        if group is None:
            return
        with self._lock:
            events, left = self._groups.get(group[0], ({}, [0]))
            if (event := events.get(str(request.tool_call.get("id")))) is not None:
                event.set()
            left[0] -= 1
            if left[0] == 0:
                del self._groups[group[0]]

    async def finished(self, request: ToolCallRequest) -> None:
        """Wait until every other call of this call's task has finished or paused."""
        group = self._key(request)
        if group is None:
            return
        me = str(request.tool_call.get("id"))
        events = self._events(*group)
        events[me].set()
        await asyncio.gather(*(event.wait() for name, event in events.items() if name != me))


# --- identity ---------------------------------------------------------------------------------


def step_of(request: ToolCallRequest, *, required: bool) -> _Step:
    """The call's durable identity: the run's `thread_id`, the model's `tool_call_id` (what
    remembered results are kept under), and its position (what the ledger keys it by)."""
    configurable = (request.runtime.config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    call = request.tool_call.get("id")
    step = _Step(
        run_id=None if thread in (None, "") else str(thread),
        call_id=call or None,
        position=position_of(request),
    )
    if required and step.run_id is None:
        raise TypeError(
            f"Tool {request.tool_call['name']!r} is guarded, but the run has no thread_id: "
            "invoke the graph with config={'configurable': {'thread_id': ...}} (and a "
            "checkpointer), the identity under which the ledger records its effects."
        )
    if required and step.position is None:
        raise TypeError(
            f"Tool {request.tool_call['name']!r} is guarded, but the call has no position in "
            "its run: add LedgerMiddleware() to create_agent's middleware, or run the ToolNode "
            "in a LangGraph graph."
        )
    return step


def position_of(request: ToolCallRequest) -> str | None:
    """`tools/turn-<n>` for the calls of the model's n-th turn (counted by `LedgerState`),
    `#k` added for the k-th identical call of that turn; in a hand-built graph without the
    count, `tools@<step>` from LangGraph's step number (stable on resume, shifted by forking
    a thread's history)."""
    state = request.state
    turns = state.get("ledger_model_turns") if isinstance(state, dict) else None
    if isinstance(turns, int):
        base = f"tools/turn-{turns}"
    else:
        metadata = (request.runtime.config or {}).get("metadata") or {}
        step = metadata.get("langgraph_step")
        if not isinstance(step, int):
            return None
        base = f"tools@{step}"
    calls = [_signature(call) for call in _calls_of(state)]
    me = _signature(request.tool_call)
    if me in calls:
        ids = [call.get("id") for call in _calls_of(state)]
        index = ids.index(request.tool_call.get("id")) if request.tool_call.get("id") in ids else 0
        return base + ordinal_among(calls, index)
    return base


def _signature(call: Any) -> tuple[str, str]:
    """A tool call as (name, canonical arguments): what makes two calls of one turn identical."""
    try:
        args = json.dumps(canonical(call.get("args") or {}, "arguments"), sort_keys=True)
    except TypeError:
        args = repr(call.get("args"))
    return str(call.get("name")), args


@contextmanager
def _bound(step: _Step, *, strict: bool) -> Iterator[None]:
    """Bind the position around the call: always for a guarded tool (`bind_position` refuses
    an unusable one), and for an unguarded one when there is a usable one (for guarded code it
    may call)."""
    usable = all(isinstance(v, str) and 0 < len(v) <= 200 for v in (step.run_id, step.position))
    if step.run_id is None or step.position is None or not (strict or usable):
        yield
        return
    with bind_position(step.run_id, step.position):
        yield


def guard_of(tool: BaseTool | None) -> GuardSpec | None:
    """The guard under a LangChain tool, if its function (sync or async) is guarded."""
    for function in (getattr(tool, "func", None), getattr(tool, "coroutine", None)):
        spec = getattr(function, "__ledger_guard__", None)
        if isinstance(spec, GuardSpec):
            return spec
    return None


def _pushed(request: ToolCallRequest) -> bool:
    metadata = (request.runtime.config or {}).get("metadata") or {}
    path: Sequence[Any] = metadata.get("langgraph_path") or ()
    return len(path) > 0 and path[0] == _PUSH


def _guarded_siblings(request: ToolCallRequest) -> bool:
    """Whether a guarded call runs in the same ToolNode task (the latest AI message's calls,
    which a ToolNode given the graph state runs together)."""
    tools = {tool.name: tool for tool in request.runtime.tools or ()}
    return any(
        call.get("id") != request.tool_call.get("id") and guard_of(tools.get(call["name"]))
        for call in _calls_of(request.state)
    )


def _calls_of(state: Any) -> Sequence[Any]:
    messages = state.get("messages") if isinstance(state, dict) else state
    if not isinstance(messages, list):
        messages = getattr(state, "messages", None) or []
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message.tool_calls
    return ()


# --- remembered results -----------------------------------------------------------------------


def keep(result: ToolMessage) -> dict[str, Any]:
    return {"message": message_to_dict(result)}


def restore(value: dict[str, Any]) -> ToolMessage:
    (message,) = messages_from_dict([value["message"]])
    if not isinstance(message, ToolMessage):  # pragma: no cover - only this module writes it
        raise TypeError(f"{REMEMBERED} holds a {type(message).__name__}, not a ToolMessage.")
    return message
