"""`@guarded`: a tool function whose side effect is recorded before it runs and run at most
once per action, that keeps its own signature so that it stacks under a framework's tool
decorator.

    @function_tool                      # or @tool, @agent.tool, @mcp.tool, @DBOS.step() ...
    @guarded(tool="charge_card")
    async def charge_card(order_id: str, amount: str) -> dict:
        \"\"\"Charge the order's card.\"\"\"
        key = current_effect().idempotency_key
        return await payments.charge(order_id, amount, idempotency_key=key)

A call records the intent and claims it in one request to the ledger, under the step identity
its adapter bound (`ledger_client.context.bind_step`), with the bound arguments as the request
(`ledger_client.canonical`). Then:
- claimed: the function runs; what it returns is confirmed (its `provider_ref` is
  `provider_ref(result)`, by default the result's `id`), the confirmation written behind while
  the result goes back (`ledger_client.behind`; `confirm_behind=False` waits for it); an
  exception reports `unknown` (or `not_sent` for `NotSent`) and is re-raised;
- confirmed already (a replay after a crash, a resumed graph, a re-issued call): the function
  is not called and the recorded result is returned;
- in doubt (met again after a crash: under a dead process's lease, `unknown`): the guard waits,
  up to `settle_timeout` seconds, for the ledger to settle it (`ledger_client.settling`), then
  returns the recorded result, runs the function if it was proven not done (or a resend is
  safe), or raises what it ended as; still in doubt then, `NeedsReview` is raised;
- held (awaiting an operator's approval, or an operator must decide): the hold is raised
  (`ApprovalPending`, `NeedsReview`), for the adapter to turn into its framework's pause; with
  `wait=True` the guard waits on the ledger's long poll instead, and goes on once it resolves.
Under a position bound by an adapter (`bind_position`) the ledger keys the call by its position
and request (`key_includes_request`, ADR 0018). An effect the adapter already opened for the
call (`ledger_client.context.handing_over`) is used instead of asking the ledger again.
Nothing runs when the ledger cannot be asked (`LedgerUnavailable`), when the arguments have no
canonical form, or when no step identity is bound (`TypeError`, before anything is written).
"""

from __future__ import annotations

import functools
import inspect
import time
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

from ledger_client.aio import AsyncLedger
from ledger_client.canonical import canonical, lenient
from ledger_client.config import LedgerConfig, default_config
from ledger_client.context import StepIdentity, current_step, running, take_handed
from ledger_client.effect import AsyncEffect, Effect
from ledger_client.errors import ApprovalPending, NeedsReview
from ledger_client.settling import asettled, settled
from ledger_client.sync import Ledger

P = ParamSpec("P")
R = TypeVar("R")
Target = str | Callable[[dict[str, Any]], str] | None
AnyLedger = Ledger | AsyncLedger | LedgerConfig

# Framework objects passed to tools (a run context, a tool runtime): never part of a request.
_CONTEXT_TYPES: list[type] = []
# Markers in `Annotated[...]` that say the framework fills the parameter in (LangChain's
# `InjectedToolCallId`, `InjectedState`): never part of a request either.
_CONTEXT_MARKERS: list[type] = []


def register_context_type(cls: type) -> None:
    """Arguments of this type are the framework's context, not the action: the guard leaves
    them out of the request. Adapters register their framework's types on import."""
    if cls not in _CONTEXT_TYPES:
        _CONTEXT_TYPES.append(cls)


def register_context_annotation(marker: type) -> None:
    """Parameters annotated `Annotated[T, marker]` (the class, a subclass or an instance of
    it) are filled in by the framework: the guard leaves them out of the request."""
    if marker not in _CONTEXT_MARKERS:
        _CONTEXT_MARKERS.append(marker)


def _is_marker(meta: object) -> bool:
    markers = tuple(_CONTEXT_MARKERS)
    return isinstance(meta, markers) or (isinstance(meta, type) and issubclass(meta, markers))


_injected: dict[Callable[..., Any], tuple[int, frozenset[str]]] = {}


def injected_parameters(fn: Callable[..., Any]) -> frozenset[str]:
    """The parameters of `fn` whose annotation carries a registered context marker (read once
    per function and per set of markers)."""
    known = _injected.get(fn)
    if known is not None and known[0] == len(_CONTEXT_MARKERS):
        return known[1]
    names = _annotated_as_injected(fn)
    _injected[fn] = (len(_CONTEXT_MARKERS), names)
    return names


def _annotated_as_injected(fn: Callable[..., Any]) -> frozenset[str]:
    if not _CONTEXT_MARKERS:
        return frozenset()
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that does not resolve: read them as written
        hints = dict(getattr(fn, "__annotations__", {}))
    return frozenset(
        name
        for name, hint in hints.items()
        if typing.get_origin(hint) is typing.Annotated
        and any(_is_marker(meta) for meta in hint.__metadata__)
    )


def _provider_ref(result: Any) -> str:
    ref = result.get("id") if isinstance(result, Mapping) else getattr(result, "id", None)
    return "" if ref is None else str(ref)


@dataclass(frozen=True)
class GuardSpec:
    """What a guard records: the tool (as declared in the ledger), the target (a string, a
    `{argument}` template, or a function of the request; default: the tool's name), how to
    read the provider's reference, and whether to wait out holds."""

    tool: str
    target: Target = None
    provider_ref: Callable[[Any], str] = _provider_ref
    wait: bool = False
    wait_timeout: float = 3600.0
    # The ledger the guard asks; None: `configure(...)`'s, or the environment's.
    ledger: AnyLedger | None = None
    # Seconds to wait for the ledger to settle an effect in doubt (0: raise at once).
    settle_timeout: float = 300.0
    # Write the confirmation behind, while the result goes back (`ledger_client.behind`).
    confirm_behind: bool = True

    def sync_ledger(self) -> Ledger:
        """The sync client this guard uses (for an adapter's own calls: cancel, wait)."""
        if isinstance(self.ledger, AsyncLedger):
            raise TypeError(f"guarded tool {self.tool!r} was given an AsyncLedger")
        if isinstance(self.ledger, Ledger):
            return self.ledger
        return (self.ledger or default_config()).sync()

    def async_ledger(self) -> AsyncLedger:
        """The async client this guard uses on the running event loop."""
        if isinstance(self.ledger, Ledger):
            raise TypeError(f"guarded tool {self.tool!r} was given a sync Ledger")
        if isinstance(self.ledger, AsyncLedger):
            return self.ledger
        return (self.ledger or default_config()).for_loop()

    def target_of(self, request: dict[str, Any]) -> str:
        if self.target is None:
            return self.tool
        if callable(self.target):
            return str(self.target(request))
        try:
            return self.target.format_map(request) if "{" in self.target else self.target
        except (KeyError, IndexError, ValueError) as exc:
            raise TypeError(
                f"target {self.target!r} names no argument of the call: {exc}"
            ) from None

    def _name(self, identity: StepIdentity | None) -> StepIdentity:
        identity = identity or current_step()
        if identity is None:
            raise TypeError(
                f"No step identity for a call of guarded tool {self.tool!r}: run it under an "
                "adapter, or inside `with bind_step(run_id=..., call_id=...)`."
            )
        return identity

    def run(
        self,
        ledger: Ledger,
        request: dict[str, Any],
        call: Callable[[Effect], R],
        identity: StepIdentity | None = None,
    ) -> R | Any:
        """Record, claim, run `call(effect)` once, report; see the module docstring. `request`
        is made canonical here too (`TypeError` before anything is written)."""
        step = self._name(identity)
        request = _canonical_request(request)
        args = (step.run_id, step.call_id, self.tool, self.target_of(request), request)
        options: dict[str, Any] = {"key_includes_request": True} if step.by_request else {}
        deadline = time.monotonic() + self.wait_timeout
        settle_by = time.monotonic() + self.settle_timeout
        handed = take_handed(step, self.tool, request, Effect)
        effect = handed if isinstance(handed, Effect) else None
        while effect is None:
            try:
                effect = ledger.open(*args, **options)
            except NeedsReview as hold:
                if not settled(ledger, hold, step.run_id, settle_by) and not (
                    self.wait and _waited(ledger.wait_for_change, hold, deadline)
                ):
                    raise
            except ApprovalPending as hold:
                if not self.wait or not _waited(ledger.wait_for_change, hold, deadline):
                    raise
        if effect.replayed:
            return effect.result
        with running(effect):
            try:
                if ledger.call_timeout is not None:
                    effect.ensure_lease(ledger.call_timeout)
                result = call(effect)
            except BaseException as exc:
                if effect.outcome is None:
                    try:
                        effect.finish(exc)
                    except Exception as report_error:
                        _unreported(exc, effect.id, report_error)
                raise
        if effect.outcome is None:
            effect.confirm(self.provider_ref(result), lenient(result), wait=not self.confirm_behind)
        return result

    async def arun(
        self,
        ledger: AsyncLedger,
        request: dict[str, Any],
        call: Callable[[AsyncEffect], Awaitable[R]],
        identity: StepIdentity | None = None,
    ) -> R | Any:
        """`run`, awaited."""
        step = self._name(identity)
        request = _canonical_request(request)
        args = (step.run_id, step.call_id, self.tool, self.target_of(request), request)
        options: dict[str, Any] = {"key_includes_request": True} if step.by_request else {}
        deadline = time.monotonic() + self.wait_timeout
        settle_by = time.monotonic() + self.settle_timeout
        handed = take_handed(step, self.tool, request, AsyncEffect)
        effect = handed if isinstance(handed, AsyncEffect) else None
        while effect is None:
            try:
                effect = await ledger.open(*args, **options)
            except NeedsReview as hold:
                if not await asettled(ledger, hold, step.run_id, settle_by) and not (
                    self.wait and await _awaited(ledger, hold, deadline)
                ):
                    raise
            except ApprovalPending as hold:
                if not self.wait or not await _awaited(ledger, hold, deadline):
                    raise
        if effect.replayed:
            return effect.result
        with running(effect):
            try:
                if ledger.call_timeout is not None:
                    await effect.ensure_lease(ledger.call_timeout)
                result = await call(effect)
            except BaseException as exc:
                if effect.outcome is None:
                    try:
                        await effect.finish(exc)
                    except Exception as report_error:
                        _unreported(exc, effect.id, report_error)
                raise
        if effect.outcome is None:
            ref = self.provider_ref(result)
            await effect.confirm(ref, lenient(result), wait=not self.confirm_behind)
        return result


def _canonical_request(request: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise TypeError(f"the request must be a dict of arguments, not {type(request).__name__}")
    return {name: canonical(value, f"argument {name!r}") for name, value in request.items()}


def _hold_of(hold: ApprovalPending | NeedsReview) -> tuple[str, str] | None:
    """(effect id, status) to wait on, or None when the hold names no effect."""
    if isinstance(hold, ApprovalPending):
        return (hold.effect_id, "awaiting_approval") if hold.effect_id else None
    if hold.effect is None:
        return None
    return hold.effect.id, hold.status


def _waited(wait: Callable[..., Any], hold: ApprovalPending | NeedsReview, deadline: float) -> bool:
    """Wait until the held effect moves (True) or the deadline passes (False)."""
    held = _hold_of(hold)
    left = deadline - time.monotonic()
    if held is None or left < 1:
        return False
    record = wait(held[0], status=held[1], timeout=left)
    return bool(record.status != held[1]) or time.monotonic() < deadline


async def _awaited(
    ledger: AsyncLedger, hold: ApprovalPending | NeedsReview, deadline: float
) -> bool:
    held = _hold_of(hold)
    left = deadline - time.monotonic()
    if held is None or left < 1:
        return False
    record = await ledger.wait_for_change(held[0], status=held[1], timeout=left)
    return record.status != held[1] or time.monotonic() < deadline


def _unreported(exc: BaseException, effect_id: str, report_error: Exception) -> None:
    """The call failed and its `unknown` could not be reported either: the effect stays
    `dispatching` until its lease runs out, when the ledger's recovery takes it up."""
    exc.add_note(f"effect {effect_id}: the outcome could not be recorded: {report_error}")


def request_of(
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    injected: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The call's arguments as the effect's request: bound by name, defaults applied, the
    framework's context left out (by type, or by the names in `injected`), every value
    canonical (`TypeError` naming the argument)."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    request: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if name in injected or (_CONTEXT_TYPES and isinstance(value, tuple(_CONTEXT_TYPES))):
            continue
        if kind is inspect.Parameter.VAR_KEYWORD:
            request.update(canonical(value, f"argument '**{name}'") or {})  # type: ignore[arg-type]
        else:
            request[name] = canonical(value, f"argument {name!r}")
    return request


def guarded(
    tool: str,
    *,
    target: Target = None,
    ledger: AnyLedger | None = None,
    provider_ref: Callable[[Any], str] | None = None,
    wait: bool = False,
    wait_timeout: float = 3600.0,
    settle_timeout: float = 300.0,
    confirm_behind: bool = True,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Guard a tool function; see the module docstring. The function keeps its name, doc,
    signature and annotations (`__wrapped__` too), and carries `__ledger_guard__`."""
    spec = GuardSpec(
        tool,
        target,
        provider_ref or _provider_ref,
        wait,
        wait_timeout,
        ledger,
        settle_timeout,
        confirm_behind,
    )

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(fn)
        if inspect.iscoroutinefunction(fn):
            wrapper: Callable[..., Any] = _async_wrapper(spec, fn, signature)
        else:
            wrapper = _sync_wrapper(spec, fn, signature)
        functools.update_wrapper(wrapper, fn)
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        wrapper.__ledger_guard__ = spec  # type: ignore[attr-defined]
        return cast(Callable[P, R], wrapper)

    return decorate


def _sync_wrapper(
    spec: GuardSpec, fn: Callable[..., Any], signature: inspect.Signature
) -> Callable[..., Any]:
    if isinstance(spec.ledger, AsyncLedger):
        raise TypeError(f"{fn.__qualname__} is not async: guard it with a Ledger")

    def call(*args: Any, **kwargs: Any) -> Any:
        request = request_of(signature, args, kwargs, injected_parameters(fn))
        return spec.run(spec.sync_ledger(), request, lambda effect: fn(*args, **kwargs))

    return call


def _async_wrapper(
    spec: GuardSpec, fn: Callable[..., Any], signature: inspect.Signature
) -> Callable[..., Any]:
    if isinstance(spec.ledger, Ledger):
        raise TypeError(f"{fn.__qualname__} is async: guard it with an AsyncLedger")

    async def call(*args: Any, **kwargs: Any) -> Any:
        request = request_of(signature, args, kwargs, injected_parameters(fn))
        client = spec.async_ledger()
        return await spec.arun(client, request, lambda effect: fn(*args, **kwargs))

    return call
