"""Who is asking, in context variables: the step identity an adapter binds from its framework's
own hooks, and the effect a guarded call is running.

A framework's tool function has no parameter for the ledger's identity, and must keep the
signature the framework builds the model's tool schema from. So the adapter binds the
framework's durable call identity around the call (`bind_step`), and the guard reads it
(`current_step`). Context variables follow the code: each asyncio task starts with a copy of
its creator's, and a thread started by the framework inherits nothing it was not given.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger_client.effect import EffectHandle


@dataclass(frozen=True)
class StepIdentity:
    """`run_id`: the durable run (a LangGraph thread, a DBOS workflow); `call_id`: the call
    within it (a tool call id, a step id). The effect key is `run_id:call_id`, unless the tool
    declares a business key (`key_fields`), from which the ledger derives it instead."""

    run_id: str
    call_id: str


_step: ContextVar[StepIdentity | None] = ContextVar("ledger_step", default=None)
_effect: ContextVar[EffectHandle | None] = ContextVar("ledger_effect", default=None)


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
