"""Who is asking, in context variables: the step identity an adapter binds from its framework's
own hooks, and the effect a guarded call is running.

A framework's tool function has no parameter for the ledger's identity, and must keep the
signature the framework builds the model's tool schema from. So the adapter binds the call's
identity around the call, and the guard reads it (`current_step`). Adapters bind a position
(`bind_position`: the run and where in it the call was made, such as the model's third turn),
which the ledger completes with the call's request (ADR 0018): a model asked again after a
crash re-issues its call with a new call id, but at the same position and with the same
arguments. `bind_step` binds an identity the caller keeps durable itself (a DBOS step id).
An adapter that already opened the call's effect (recorded and claimed it, to learn whether
an operator must approve it first) hands it to the guard (`handing_over`), which then does not
ask the ledger again.

Context variables follow the code: each asyncio task starts with a copy of its creator's, and a
thread started by the framework inherits nothing it was not given.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger_client.effect import EffectHandle


@dataclass(frozen=True)
class StepIdentity:
    """`run_id`: the durable run (a LangGraph thread, a DBOS workflow); `call_id`: the call
    within it (a step id), or with `by_request` its position (`tools/turn-3`). The effect key
    is `run_id:call_id`, with `by_request` followed by a keyed digest of the tool and the
    request; a tool's business key (`key_fields`) wins over both."""

    run_id: str
    call_id: str
    by_request: bool = False


_step: ContextVar[StepIdentity | None] = ContextVar("ledger_step", default=None)
_effect: ContextVar[EffectHandle | None] = ContextVar("ledger_effect", default=None)
_handed: ContextVar[Handed | None] = ContextVar("ledger_handed", default=None)


@dataclass(frozen=True)
class Handed:
    """An effect an adapter opened for a call, with what it opened it for."""

    effect: EffectHandle
    run_id: str
    call_id: str
    tool: str
    request: dict[str, Any]


def _identifier(name: str, value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise TypeError(f"{name} must be a non-empty string of at most 200 characters: {value!r}")
    return value


@contextmanager
def bind_step(run_id: str, call_id: str) -> Iterator[StepIdentity]:
    """Make (`run_id`, `call_id`) the identity of guarded calls made inside the block."""
    identity = StepIdentity(_identifier("run_id", run_id), _identifier("call_id", call_id))
    token = _step.set(identity)
    try:
        yield identity
    finally:
        _step.reset(token)


@contextmanager
def bind_position(run_id: str, position: str) -> Iterator[StepIdentity]:
    """Make (`run_id`, `position`) the identity of guarded calls made inside the block, each
    told apart by its request: the same call at the same position is the same effect. Two
    identical calls made on purpose at one position take an ordinal (`ordinal_among`)."""
    identity = StepIdentity(
        _identifier("run_id", run_id), _identifier("position", position), by_request=True
    )
    token = _step.set(identity)
    try:
        yield identity
    finally:
        _step.reset(token)


def ordinal_among(calls: Sequence[tuple[str, str]], index: int) -> str:
    """The suffix that tells apart identical calls at one position: "" for the first call of
    its kind (tool name and canonical arguments) in `calls`, `#2` for the second, and so on."""
    same = sum(1 for call in calls[:index] if call == calls[index])
    return f"#{same + 1}" if same else ""


@contextmanager
def handing_over(handed: Handed) -> Iterator[None]:
    """Give the guarded call made inside the block the effect its adapter opened for it. The
    guard takes it (`take_handed`) only for the same run, step, tool and request; otherwise it
    opens its own, and `still_handed()` tells the adapter to release the one it opened."""
    token = _handed.set(handed)
    try:
        yield
    finally:
        _handed.reset(token)


def take_handed(
    step: StepIdentity, tool: str, request: dict[str, Any], kind: type[EffectHandle]
) -> EffectHandle | None:
    """The handed effect, taken, if it was opened for this call (and with the client `kind`
    the guard reports with); None otherwise."""
    handed = _handed.get()
    if (
        handed is None
        or not isinstance(handed.effect, kind)
        or (handed.run_id, handed.call_id, handed.tool, handed.request)
        != (step.run_id, step.call_id, tool, request)
    ):
        return None
    _handed.set(None)
    return handed.effect


def still_handed() -> Handed | None:
    """The handed effect, if no guarded call in the block took it."""
    return _handed.get()


def current_step() -> StepIdentity | None:
    return _step.get()


def current_effect() -> EffectHandle:
    """The effect the guarded call being run holds: its `idempotency_key` goes to the provider."""
    effect = _effect.get()
    if effect is None:
        raise LookupError("current_effect() is set only while a guarded function runs.")
    return effect


@contextmanager
def running(effect: EffectHandle) -> Iterator[EffectHandle]:
    token = _effect.set(effect)
    try:
        yield effect
    finally:
        _effect.reset(token)
