"""What the Agents SDK adapter knows of a guarded tool and of each of its calls: the request the
guard will record, the call's identity in the ledger, and the effect opened for it before it
ran.

The SDK asks the tool's `needs_approval` right before it runs a call. The adapter answers by
opening the call's effect (recorded and claimed in one request): held for an operator, the SDK
interrupts the run; claimed, the effect waits here for the call, and the guard uses it instead
of asking again (`ledger_client.context.handing_over`). An effect claimed for a call the SDK
then did not run (a tool guardrail refused it, the run was cancelled) is released as not sent
after `UNUSED_CLAIM_SECONDS`, or at once when the guard opened another.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agents import RunContextWrapper
from agents.function_schema import FuncSchema

from ledger_client.adapters import openai_agents_positions as positions
from ledger_client.context import Handed, bind_position, bind_step
from ledger_client.effect import AsyncEffect, Effect, EffectHandle
from ledger_client.guard import GuardSpec, request_of

log = logging.getLogger("ledger_client.adapters.openai_agents")

UNUSED_CLAIM_SECONDS = 60.0
"""How long an effect claimed for a call waits for the call before it is released."""

_RELEASED = "claimed for an Agents SDK call that did not run"


@dataclass(frozen=True)
class GuardedTool:
    """What the adapter knows of one guarded tool."""

    spec: GuardSpec
    signature: inspect.Signature
    takes_context: bool
    is_async: bool
    operator_wait: float
    # The tool's parameters as the SDK validates them before it calls the function.
    parameters: FuncSchema | None = None
    # Interrupt the run for an effect an operator must decide (else the model is told so).
    pause_for_review: bool = True


def request_for(
    known: GuardedTool, ctx: RunContextWrapper[Any], arguments: dict[str, Any]
) -> dict[str, Any] | None:
    """The request the guard will record for the model's arguments: validated by the tool's
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


# --- The call's identity ---------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """A call as the ledger knows it: its run and position, the key completed by the request;
    or, for a run not given `ledger_run_config()`, the SDK's call id (ADR 0010's identity,
    which a crash does not keep)."""

    run_id: str
    step: str
    by_request: bool

    @contextmanager
    def bound(self) -> Iterator[None]:
        binder = bind_position if self.by_request else bind_step
        with binder(self.run_id, self.step):
            yield

    def options(self) -> dict[str, Any]:
        return {"key_includes_request": True} if self.by_request else {}


_warned: set[str] = set()


def identity_of(
    run_id: str, call_id: str, known: GuardedTool, request: dict[str, Any] | None
) -> Identity:
    """The call's position when the run's turn is known here, else its call id."""
    position = positions.known_position(run_id, call_id)
    if position is None and request is not None:
        position = positions.call_position(run_id, call_id, known.spec.tool, request)
    if position is not None:
        return Identity(run_id, position, by_request=True)
    if known.spec.tool not in _warned:
        _warned.add(known.spec.tool)
        log.warning(
            "Calls of guarded tool %r are known by the SDK's call id, which a crash does not "
            "keep: run the agent with run_config=ledger_run_config(...).",
            known.spec.tool,
        )
    return Identity(run_id, call_id, by_request=False)


# --- Effects opened before the call ----------------------------------------------------------


@dataclass
class _Opened:
    handed: Handed
    cancel: Callable[[], object]


_opened: dict[tuple[str, str], _Opened] = {}
_releasing: set[asyncio.Task[None]] = set()


def keep_opened(run_id: str, call_id: str, handed: Handed) -> None:
    """Keep the effect opened for a call until the call takes it (`take_opened`)."""
    key = (run_id, call_id)
    effect = handed.effect
    cancel: Callable[[], object] = lambda: None  # noqa: E731 (a replay holds nothing)
    if not effect.replayed and isinstance(effect, Effect):
        timer = threading.Timer(UNUSED_CLAIM_SECONDS, _release_unused_sync, [key])
        timer.daemon = True
        timer.start()
        cancel = timer.cancel
    elif not effect.replayed:
        loop = asyncio.get_running_loop()
        cancel = loop.call_later(UNUSED_CLAIM_SECONDS, _release_unused_async, loop, key).cancel
    _opened[key] = _Opened(handed, cancel)


def take_opened(run_id: str, call_id: str) -> Handed | None:
    opened = _opened.pop((run_id, call_id), None)
    if opened is None:
        return None
    opened.cancel()
    return opened.handed


def release(effect: EffectHandle) -> None:
    """Give back the claim of an effect whose call did not run (sync client)."""
    if isinstance(effect, Effect) and not effect.replayed and effect.outcome is None:
        try:
            effect.not_sent(_RELEASED)
        except Exception as exc:  # its lease runs out; the ledger's recovery takes it up
            log.warning("effect %s was not released: %s", effect.id, exc)


async def arelease(effect: EffectHandle) -> None:
    """Give back the claim of an effect whose call did not run (async client)."""
    if isinstance(effect, AsyncEffect) and not effect.replayed and effect.outcome is None:
        try:
            await effect.not_sent(_RELEASED)
        except Exception as exc:
            log.warning("effect %s was not released: %s", effect.id, exc)


def _release_unused_sync(key: tuple[str, str]) -> None:
    opened = _opened.pop(key, None)
    if opened is not None:
        release(opened.handed.effect)


def _release_unused_async(loop: asyncio.AbstractEventLoop, key: tuple[str, str]) -> None:
    opened = _opened.pop(key, None)
    if opened is not None:
        task = loop.create_task(arelease(opened.handed.effect))
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)
