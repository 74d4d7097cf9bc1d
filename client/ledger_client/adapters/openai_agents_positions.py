"""Where a guarded Agents SDK call stands: its run, named by the caller, and its position in
the run, `turn-<n>` (the call came from the conversation's n-th model response), with `#k` for
the k-th identical call of one response (ADR 0018).

The SDK (0.24) keeps no durable turn counter a tool can read: `usage.requests` counts only what
the model reports, `turn_input` starts again on a resume, and `RunState`'s turn is private. What
is durable is the conversation itself: the session (or the input list) a run is resumed from
holds every model response whose turn ended, and the SDK sends it whole to the model. So
`ledger_run_config()` puts a `call_model_input_filter` before the model call that counts the
model responses in the input as the SDK built it (before your own filter, which may trim what
the model sees), and the calls of the response that follows are at the next turn.

A crash during a tool call loses the turn: the SDK saves a turn's items to the session only
once its tools ran. The run resumed from the session asks the model again with the same
responses before it, and the model's re-issued call (under a new call id) is at the same turn,
with the same arguments: the same effect. The counting needs the conversation to be sent
whole: a session that trims its history (`SessionSettings(limit=...)`), a conversation kept by
the server (`conversation_id`, `previous_response_id`) or a handoff filter that rewrites the
history move the count.
"""

from __future__ import annotations

import inspect
import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agents import RunContextWrapper
from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData

from ledger_client.context import ordinal_among

_run: ContextVar[str | None] = ContextVar("ledger_openai_agents_run", default=None)

# Items of the model's output that are not a `..._call`: a response is a run of these.
_MODEL_ITEMS = frozenset({"reasoning", "mcp_list_tools", "mcp_approval_request"})
# Runs whose turns this process follows, the oldest forgotten first.
_KEPT_RUNS = 10_000


# --- The run ---------------------------------------------------------------------------------


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


def block_run_id() -> str | None:
    """`ledger_run(...)`'s run id, or None outside the block."""
    return _run.get()


def _context_run_id(context: object) -> str | None:
    if isinstance(context, Mapping):
        value = context.get("ledger_run_id")
    else:
        value = getattr(context, "ledger_run_id", None)
    return value if isinstance(value, str) and value else None


def run_id_of(ctx: RunContextWrapper[Any]) -> str | None:
    """The ledger's run of a call: `ledger_run(...)`'s, else the run context object's
    `ledger_run_id` (an attribute, or a key of a mapping); None when neither is set."""
    return _run.get() or _context_run_id(ctx.context)


def required_run_id(ctx: RunContextWrapper[Any], tool: str) -> str:
    run_id = run_id_of(ctx)
    if run_id is None:
        raise TypeError(
            f"No run identity for a call of guarded tool {tool!r}: run the agent inside "
            "`with ledger_run(run_id):`, or give its context a `ledger_run_id`."
        )
    return run_id


# --- Counting the model's responses ------------------------------------------------------------


def _field(item: object, name: str) -> object:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def _from_model(item: object) -> bool:
    """Is this input item part of a model response (a message it wrote, a call, reasoning)?"""
    role = _field(item, "role")
    if role is not None:
        return role == "assistant"
    kind = _field(item, "type")
    return isinstance(kind, str) and (kind.endswith("_call") or kind in _MODEL_ITEMS)


def responses_in(items: Iterable[object]) -> int:
    """The model responses in a conversation: the runs of consecutive items the model wrote
    (one response's calls come together, before their outputs)."""
    count, inside = 0, False
    for item in items:
        mine = _from_model(item)
        count += mine and not inside
        inside = mine
    return count


@dataclass
class _Turns:
    """One run's turn, as the latest model call showed it, and the positions given so far."""

    turn: int
    calls: list[tuple[str, str]] = field(default_factory=list)  # this turn's, in order
    positions: dict[str, str] = field(default_factory=dict)  # by call id


_runs: OrderedDict[str, _Turns] = OrderedDict()


def _count(run_id: str, items: list[Any]) -> None:
    turn = responses_in(items) + 1
    known = _runs.pop(run_id, None)
    if known is None or known.turn != turn:
        known = _Turns(turn, positions=known.positions if known is not None else {})
    _runs[run_id] = known
    while len(_runs) > _KEPT_RUNS:
        _runs.popitem(last=False)


def counting_turns(then: CallModelInputFilter | None) -> CallModelInputFilter:
    """A `call_model_input_filter` that notes the run's turn, then runs `then` (your own)."""

    async def count_then_filter(data: CallModelData[Any]) -> ModelInputData:
        run_id = _run.get() or _context_run_id(data.context)
        if run_id is not None:
            _count(run_id, data.model_data.input)
        if then is None:
            return data.model_data
        filtered = then(data)
        return await filtered if inspect.isawaitable(filtered) else filtered

    return count_then_filter


# --- Positions -------------------------------------------------------------------------------


def _signature(tool: str, request: Mapping[str, Any]) -> tuple[str, str]:
    return tool, json.dumps(request, sort_keys=True, default=str)


def call_position(run_id: str, call_id: str, tool: str, request: Mapping[str, Any]) -> str | None:
    """`turn-<n>[#k]` for a call of the run's current turn, the same for the same call id when
    asked again; None when no model call of the run was counted in this process (the run was
    not given `ledger_run_config()`, or the call is resumed from an interruption elsewhere)."""
    known = _runs.get(run_id)
    if known is None:
        return None
    if call_id in known.positions or known.turn < 1:
        return known.positions.get(call_id)
    known.calls.append(_signature(tool, request))
    position = f"turn-{known.turn}" + ordinal_among(known.calls, len(known.calls) - 1)
    known.positions[call_id] = position
    return position


def known_position(run_id: str, call_id: str) -> str | None:
    """The position already given to this call in this process, or None."""
    known = _runs.get(run_id)
    return known.positions.get(call_id) if known is not None else None


def note_position(run_id: str, call_id: str, position: str) -> None:
    """Remember a position found elsewhere (the ledger's record of a held call)."""
    known = _runs.setdefault(run_id, _Turns(0))  # turn 0: no model call counted here
    known.positions[call_id] = position
