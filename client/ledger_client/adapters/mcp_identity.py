"""Who is calling, for the guarded MCP proxy (`ledger_client.adapters.mcp`): the step identity
of a `tools/call` from its request's `_meta`, the request the ledger records, and the `_meta`
the upstream gets.

MCP gives a call no durable id: a JSON-RPC request id names one request on one connection, and
a client that re-issues a call after the proxy died sends a new one. So the client names the
call in `_meta`, in one of two ways:

- `effectledger/position`: where in the run the call was made (the host's model turn,
  `turn-3`). The ledger keys the effect by the position and the call's request (ADR 0018):
  the same call re-issued at the same position, under any JSON-RPC id and any model call id,
  is the same effect; other arguments are another. Identical calls meant to happen twice at
  one position take an ordinal in the position (`turn-3#2`).
- `effectledger/call_id`: an id the client keeps for the call and sends again with every
  retry (`run_id:call_id` is the effect key). A call re-issued under a new id is a new effect.

A position wins over a call id sent with it. A tool that declares a business key
(`key_fields`) needs only the run id: the ledger derives the effect key from those fields.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from fastmcp.server.dependencies import fastmcp_request_ctx

from ledger_client.adapters.mcp_answers import Refusal, refusal_of
from ledger_client.canonical import canonical
from ledger_client.context import StepIdentity

if TYPE_CHECKING:
    from ledger_client.adapters.mcp import ToolPolicy, ToolRoute

# The request's `_meta` keys this proxy reads (MCP reserves only prefixes naming
# `modelcontextprotocol` or `mcp`; `effectledger/` is this project's).
META_RUN_ID = "effectledger/run_id"
META_CALL_ID = "effectledger/call_id"
META_POSITION = "effectledger/position"
# What it adds to the relayed request's `_meta` (replacing any value the client sent).
META_IDEMPOTENCY_KEY = "effectledger/idempotency_key"


def request_meta() -> dict[str, Any]:
    current = fastmcp_request_ctx.get()
    return dict(current.meta or {}) if current is not None else {}


def _missing(tool: str, key: str, value: object) -> Refusal:
    return Refusal(
        f"missing identity: {tool!r} is guarded by the ledger, so its call needs `_meta` "
        f"{META_RUN_ID!r} and either {META_POSITION!r} (where in the run the call is made, "
        f"such as the model turn) or {META_CALL_ID!r} (an id kept for every retry of the "
        f"call): strings of 1 to 200 characters. {key!r} is {value!r}. Nothing was run.",
        "bad_request",
    )


def _valid(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 200


def identity_of(meta: Mapping[str, Any], tool: str, policy: ToolPolicy | None) -> StepIdentity:
    """The call's step identity from the request's `_meta` (see the module docstring)."""
    run_id = meta.get(META_RUN_ID)
    if not _valid(run_id):
        raise _missing(tool, META_RUN_ID, run_id)
    assert isinstance(run_id, str)
    position = meta.get(META_POSITION)
    if position is not None:
        if not _valid(position):
            raise _missing(tool, META_POSITION, position)
        return StepIdentity(run_id, position, by_request=True)
    call_id = meta.get(META_CALL_ID)
    if call_id is None and policy is not None and policy.key_fields:
        call_id = tool  # a business key: the ledger derives the effect key from the fields
    if not _valid(call_id):
        raise _missing(tool, META_CALL_ID, call_id)
    assert isinstance(call_id, str)
    return StepIdentity(run_id, call_id)


def recorded_request(
    arguments: Mapping[str, Any] | None, route: ToolRoute, tool: str
) -> dict[str, Any]:
    """The effect's request: the call's arguments, canonical, without the key argument."""
    request: dict[str, Any] = {}
    for name, value in (arguments or {}).items():
        if name == route.key_argument:
            continue
        try:
            request[name] = canonical(value, f"argument {name!r}")
        except TypeError as exc:
            raise refusal_of(exc, tool) from None
    return request


@contextlib.contextmanager
def relayed_meta(key: str | None) -> Iterator[None]:
    """The request's `_meta` as the upstream gets it: the client's own idempotency key
    removed, the effect's added (fastmcp's proxy relays the bound request context's `_meta`)."""
    current = fastmcp_request_ctx.get()
    if current is None:
        yield
        return
    meta = {k: v for k, v in (current.meta or {}).items() if k != META_IDEMPOTENCY_KEY}
    if key is not None:
        meta[META_IDEMPOTENCY_KEY] = key
    token = fastmcp_request_ctx.set(dataclasses.replace(current, meta=meta))
    try:
        yield
    finally:
        fastmcp_request_ctx.reset(token)
