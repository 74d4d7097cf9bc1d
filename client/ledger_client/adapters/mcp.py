"""A guarded MCP proxy: an MCP server in front of another one that lets every tool call with a
side effect through the ledger first (intent and claim), and answers a repeat from the record.

    from ledger_client.adapters.mcp import guarded_proxy

    proxy = guarded_proxy("http://127.0.0.1:9000/mcp", tools_toml="tools.toml")
    proxy.run("http", port=8000)

Built on fastmcp's proxy (`create_proxy`, fastmcp 4.2.3), which relays the upstream's tool
list unchanged; the guard is its middleware (`LedgerGuard`), so it fits any `FastMCPProxy`.

- Which tools are read-only comes from the ledger's tool declarations (tools.toml:
  `read_only = true` or `preset = "read_only"`), never from the upstream's `readOnlyHint`.
  Read-only tools are relayed as they are; every other tool, declared or not, is guarded.
- The identity of a call comes from the request's `_meta`: `effectledger/run_id` and either
  `effectledger/position` (where in the run: the effect is keyed by it and the request, so a
  call re-issued after a crash under any new id meets its effect) or `effectledger/call_id`
  (an id the client keeps for every retry); `ledger_client.adapters.mcp_identity`. A tool
  whose declaration names `key_fields` needs only the run id.
- The effect's idempotency key goes upstream in the relayed request's `_meta` under
  `effectledger/idempotency_key` (`META_IDEMPOTENCY_KEY`) and, when the tool's `ToolRoute`
  names one, as an argument.
- The upstream tool's input schema fills in what a call leaves out: its `default`s are applied
  to the arguments before they are recorded, and the same arguments go upstream
  (`ledger_client.adapters.mcp_schema`).
- A repeat of a confirmed call (a client retrying after a dropped response) never reaches the
  upstream: it is answered with the recorded result.
- A refusal is a tool result with `isError` and a text saying what happened ("awaiting
  approval (effect …)"), with `effectledger/effect_id` and `effectledger/status` in its `_meta`.
"""

from __future__ import annotations

import json
import os
import re
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types
from fastmcp.exceptions import NotFoundError
from fastmcp.server import create_proxy
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.providers.proxy import FastMCPProxy
from fastmcp.tools.base import InputRequiredToolResult, RawStructuredToolResult, ToolResult
from pydantic import TypeAdapter, ValidationError

from ledger_client.adapters.mcp_answers import (
    META_EFFECT_ID,
    META_REPLAYED,
    META_STATUS,
    Refusal,
    refusal_of,
)
from ledger_client.adapters.mcp_identity import (
    META_CALL_ID,
    META_IDEMPOTENCY_KEY,
    META_POSITION,
    META_RUN_ID,
    identity_of,
    recorded_request,
    relayed_meta,
    request_meta,
)
from ledger_client.adapters.mcp_schema import schema_problem, with_defaults
from ledger_client.aio import AsyncLedger
from ledger_client.config import LedgerConfig
from ledger_client.context import StepIdentity
from ledger_client.effect import AsyncEffect
from ledger_client.errors import NeedsReview, NotSent
from ledger_client.guard import GuardSpec
from ledger_client.models import Redacted

_CONTENT = TypeAdapter(list[mcp_types.ContentBlock])
Callback = Callable[[Mapping[str, Any]], str]


# --- Tool declarations -------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolPolicy:
    """What the proxy needs of a tool's declaration in the ledger: whether it is read-only
    (relayed unguarded) and its business key (`key_fields`: no call id needed)."""

    name: str
    read_only: bool = False
    key_fields: tuple[str, ...] = ()
    # The tool's declared `call_timeout` in seconds: the relay never waits longer, since a
    # lookup's proof of absence counts on no call outlasting it.
    call_timeout: float | None = None


_DURATION = re.compile(r"(\d+)(d|h|m|s)")
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def _seconds(name: str, value: object) -> float | None:
    """A tools.toml duration ("30s", "2m", "1h30m") in seconds; None when absent."""
    if value is None:
        return None
    parts = _DURATION.findall(value) if isinstance(value, str) else []
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f'tool {name!r}: call_timeout must be a duration such as "30s"')
    return float(sum(int(n) * _SECONDS[u] for n, u in parts))


def load_tool_policies(path: str | os.PathLike[str]) -> dict[str, ToolPolicy]:
    """The tools of a tools.toml, read as the ledger reads them: `read_only = true|false`
    decides, else the preset (`preset = "read_only"`). `ValueError` on a malformed file."""
    with open(path, "rb") as file:
        document = tomllib.load(file)
    tools = document.get("tools")
    if not isinstance(tools, dict):
        raise ValueError(f"{os.fspath(path)}: expected [tools.NAME] tables")
    policies: dict[str, ToolPolicy] = {}
    for name, spec in tools.items():
        if not isinstance(spec, dict):
            raise ValueError(f"{os.fspath(path)}: tools.{name} must be a table")
        read_only = spec.get("read_only", spec.get("preset", "unsafe") == "read_only")
        fields = spec.get("key_fields", [])
        if not isinstance(read_only, bool):
            raise ValueError(f"tool {name!r}: read_only must be true or false")
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise ValueError(f"tool {name!r}: key_fields must be a list of strings")
        timeout = _seconds(name, spec.get("call_timeout"))
        policies[name] = ToolPolicy(name, read_only, tuple(fields), timeout)
    return policies


@dataclass(frozen=True)
class ToolRoute:
    """How one guarded tool is recorded and how its idempotency key reaches the upstream.

    - `ledger_tool`: the tool's name in the ledger, when it differs from the MCP name.
    - `key_argument`: also pass the key as this argument (a value the client sent for it is
      dropped: the proxy owns it, and it is no part of the recorded request).
    - `key_in_meta`: pass the key in the relayed request's `_meta` (`META_IDEMPOTENCY_KEY`).
    - `target`: the effect's target, a `{argument}` template or a function of the request
      (default: the tool's name).
    - `provider_ref`: the provider's reference from the result's structured content (default:
      its `id`).
    """

    ledger_tool: str | None = None
    key_argument: str | None = None
    key_in_meta: bool = True
    target: str | Callback | None = None
    provider_ref: Callback | None = None


# --- Results: recorded, replayed ----------------------------------------------------------------


def _envelope(result: ToolResult) -> dict[str, Any]:
    """What the ledger records of an upstream result: its content and structured content."""
    recorded: dict[str, Any] = {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content
        ]
    }
    if result.structured_content is not None:
        recorded["structuredContent"] = result.structured_content
    return recorded


def _provider_ref(route: ToolRoute) -> Callable[[Any], str]:
    def provider_ref(recorded: Any) -> str:
        structured = recorded.get("structuredContent") if isinstance(recorded, Mapping) else None
        if not isinstance(structured, Mapping):
            return ""
        if route.provider_ref is not None:
            return route.provider_ref(structured)
        ref = structured.get("id")
        return ref if isinstance(ref, str) else ""

    return provider_ref


def _text(text: str) -> list[mcp_types.ContentBlock]:
    return [mcp_types.TextContent(type="text", text=text)]


def _from_record(response: Any, meta: dict[str, Any]) -> ToolResult:
    """A tool result from a recorded response: the upstream's own result when it is one (a
    fresh call, or its replay), else the response as JSON (what the ledger's reconciliation
    recorded from the provider), else a note that retention removed it."""
    if isinstance(response, Mapping) and isinstance(response.get("content"), list):
        try:
            content = _CONTENT.validate_python(response["content"])
        except ValidationError:
            content = None
        structured = response.get("structuredContent")
        if content is not None and (structured is None or isinstance(structured, dict)):
            return ToolResult(content=content, structured_content=structured, meta=meta)
        if content is not None:
            return RawStructuredToolResult(content, structured, meta=meta)
    if response is None or isinstance(response, Redacted):
        note = "done already: this call was confirmed before; its result is no longer recorded."
        return ToolResult(content=_text(note), meta=meta)
    data = json.dumps(response, ensure_ascii=False)
    structured = dict(response) if isinstance(response, Mapping) else None
    return ToolResult(content=_text(data), structured_content=structured, meta=meta)


class _UpstreamError(Exception):
    """The upstream answered with an error result: whether it acted is not known."""


@dataclass
class _Relay:
    """The guarded call: relays the tool call upstream with the effect's key, once."""

    context: MiddlewareContext[mcp_types.CallToolRequestParams]
    call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult]
    route: ToolRoute
    request: dict[str, Any]
    timeout: float | None
    effect_id: str = ""
    error_result: ToolResult | None = None
    result: ToolResult | None = None

    async def __call__(self, effect: AsyncEffect) -> dict[str, Any]:
        self.effect_id = effect.id
        arguments = dict(self.request)
        if self.route.key_argument:
            arguments[self.route.key_argument] = effect.idempotency_key
        message = self.context.message.model_copy(update={"arguments": arguments})
        key = effect.idempotency_key if self.route.key_in_meta else None
        with relayed_meta(key), anyio.fail_after(self.timeout):
            result = await self.call_next(self.context.copy(message=message))
        if isinstance(result, InputRequiredToolResult):
            # The upstream asks the client for input before it acts (SEP-2322): nothing was
            # done yet; the client's next round, under the same identity, claims it again.
            self.result = result
            raise NotSent("the upstream asked the client for input first")
        if result.is_error:
            self.error_result = result
            raise _UpstreamError(_plain(result.content)[:2000])
        self.result = result
        return _envelope(result)

    def failed(self, exc: Exception) -> ToolResult:
        """The answer when the relayed call failed (the effect was recorded `unknown`), or when
        it succeeded but its outcome could not be recorded (the ledger's recovery finds it)."""
        if isinstance(self.result, InputRequiredToolResult):
            return self.result
        if self.result is not None:
            meta = {META_EFFECT_ID: self.effect_id, META_STATUS: "unrecorded"}
            return self.result.model_copy(update={"meta": {**(self.result.meta or {}), **meta}})
        note = (
            f"outcome unknown (effect {self.effect_id}): the upstream call failed, so whether it "
            "took effect is not known. The ledger finds out (or an operator decides); do not "
            "retry it under a new identity."
        )
        meta = {META_EFFECT_ID: self.effect_id, META_STATUS: "unknown"}
        if self.error_result is not None:
            content = [*self.error_result.content, *_text(note)]
            return ToolResult(content=content, meta=meta, is_error=True)
        return ToolResult(
            content=_text(f"{note} ({type(exc).__name__}: {exc})"), meta=meta, is_error=True
        )


def _plain(content: list[mcp_types.ContentBlock]) -> str:
    return " ".join(block.text for block in content if isinstance(block, mcp_types.TextContent))


# --- The guard ---------------------------------------------------------------------------------


class LedgerGuard(Middleware):
    """fastmcp middleware that guards every `tools/call` of a tool not declared read-only.

    - `tools`: the tool declarations: a tools.toml path or `load_tool_policies`' result.
    - `ledger`: an `AsyncLedger`, or a `LedgerConfig` (one client per event loop); default:
      `ledger_client.configure(...)`'s, else the environment's (EFFECT_LEDGER_URL, ...).
    - `routes`: a `ToolRoute` per tool name (how its key is passed, its target, ...).
    - `in_flight_wait`: seconds a retry waits for a call of the same identity that is still
      running elsewhere (a dropped response retried at once) before answering "needs review".
    - `settle_timeout`: seconds a call in doubt after a crash waits for the ledger to settle it.
    - `call_timeout`: the longest an upstream call may take; then its outcome is unknown.
    - `validate_arguments`: check the arguments against the upstream's input schema before
      anything is recorded (a call the upstream would refuse is not recorded at all).
    """

    def __init__(
        self,
        tools: str | os.PathLike[str] | Mapping[str, ToolPolicy],
        *,
        ledger: AsyncLedger | LedgerConfig | None = None,
        routes: Mapping[str, ToolRoute] | None = None,
        in_flight_wait: float = 5.0,
        call_timeout: float | None = 120.0,
        validate_arguments: bool = True,
        settle_timeout: float = 60.0,
    ) -> None:
        self.policies = dict(tools) if isinstance(tools, Mapping) else load_tool_policies(tools)
        self.ledger = ledger
        self.routes = dict(routes or {})
        self.in_flight_wait = in_flight_wait
        self.call_timeout = call_timeout
        self.validate_arguments = validate_arguments
        self.settle_timeout = settle_timeout

    def _timeout(self, tool: str) -> float | None:
        """The proxy's call_timeout, bounded by the tool's declared one."""
        policy = self.policies.get(tool)
        declared = policy.call_timeout if policy else None
        if declared is None or self.call_timeout is None:
            return declared if self.call_timeout is None else self.call_timeout
        return min(declared, self.call_timeout)

    def read_only(self, tool: str) -> bool:
        policy = self.policies.get(tool)
        return policy is not None and policy.read_only

    async def on_call_tool(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        name = context.message.name
        if self.read_only(name):
            return await call_next(context)
        try:
            return await self._guarded(context, call_next, name)
        except Refusal as refusal:
            return refusal.result()

    async def _guarded(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
        name: str,
    ) -> ToolResult:
        route = self.routes.get(name, ToolRoute())
        identity = identity_of(request_meta(), name, self.policies.get(name))
        request = recorded_request(context.message.arguments, route, name)
        request = await self._check_upstream(context, name, request, route)
        spec = GuardSpec(
            route.ledger_tool or name,
            route.target,
            _provider_ref(route),
            ledger=self.ledger,
            settle_timeout=self.settle_timeout,
        )
        relay = _Relay(context, call_next, route, request, self._timeout(name))
        # Shielded: a client that hangs up mid-call must not leave the effect without its
        # outcome (the upstream call goes on, and its result is recorded for the retry).
        with anyio.CancelScope(shield=True):
            try:
                response = await self._run(spec, request, relay, identity)
            except Exception as exc:
                if relay.effect_id:
                    return relay.failed(exc)
                raise refusal_of(exc, name) from None
        replayed = not relay.effect_id
        meta: dict[str, Any] = {META_STATUS: "confirmed", META_REPLAYED: replayed}
        if relay.effect_id:
            meta[META_EFFECT_ID] = relay.effect_id
        return _from_record(response, meta)

    async def _run(
        self, spec: GuardSpec, request: dict[str, Any], relay: _Relay, identity: StepIdentity
    ) -> Any:
        """`spec.arun`, waiting up to `in_flight_wait` for a call of the same identity that
        another request is running now (its lease is live), then answering from its record."""
        ledger = spec.async_ledger()
        deadline = time.monotonic() + self.in_flight_wait
        while True:
            try:
                return await spec.arun(ledger, request, relay, identity)
            except NeedsReview as hold:
                left = deadline - time.monotonic()
                if hold.status != "dispatching" or hold.effect is None or left <= 0:
                    raise
                record = await ledger.wait_for_change(
                    hold.effect.id, status="dispatching", timeout=left
                )
                if record.status == "dispatching":
                    await anyio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))

    async def _check_upstream(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        name: str,
        request: dict[str, Any],
        route: ToolRoute,
    ) -> dict[str, Any]:
        """The request with the defaults of the upstream tool's input schema applied (it is
        recorded and relayed as it is); refused, before anything is recorded, for a tool the
        upstream does not offer and (with `validate_arguments`) its schema refuses."""
        server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
        if server is None:
            return request
        try:
            tool = await server.get_tool(name)
        except NotFoundError:
            tool = None
        if tool is None:
            raise Refusal(f"Unknown tool: {name!r}. Nothing was run.", "bad_request")
        skip = (route.key_argument,) if route.key_argument else ()
        try:
            request = with_defaults(tool.parameters, request, skip)
        except TypeError as exc:
            raise refusal_of(exc, name) from None
        if not self.validate_arguments:
            return request
        arguments = dict(request)
        if route.key_argument:
            arguments[route.key_argument] = "idempotency-key"
        problem = schema_problem(tool.parameters, arguments)
        if problem is not None:
            raise Refusal(
                f"bad input for {name!r}: {problem} (the tool's input schema). Nothing was run.",
                "bad_request",
            )
        return request


def guarded_proxy(
    upstream: Any,
    *,
    tools_toml: str | os.PathLike[str] | Mapping[str, ToolPolicy],
    ledger: AsyncLedger | LedgerConfig | None = None,
    routes: Mapping[str, ToolRoute] | None = None,
    in_flight_wait: float = 5.0,
    call_timeout: float | None = 120.0,
    validate_arguments: bool = True,
    settle_timeout: float = 60.0,
    **settings: Any,
) -> FastMCPProxy:
    """A fastmcp proxy of `upstream` (a URL, a client transport, a server script, a FastMCP
    server: what `fastmcp.server.create_proxy` takes) with a `LedgerGuard` in front of its
    tools. `settings` go to `create_proxy` (`name=...`)."""
    proxy = create_proxy(upstream, **settings)
    proxy.add_middleware(
        LedgerGuard(
            tools_toml,
            ledger=ledger,
            routes=routes,
            in_flight_wait=in_flight_wait,
            call_timeout=call_timeout,
            validate_arguments=validate_arguments,
            settle_timeout=settle_timeout,
        )
    )
    return proxy


__all__ = [
    "META_CALL_ID",
    "META_EFFECT_ID",
    "META_IDEMPOTENCY_KEY",
    "META_POSITION",
    "META_REPLAYED",
    "META_RUN_ID",
    "META_STATUS",
    "LedgerGuard",
    "ToolPolicy",
    "ToolRoute",
    "guarded_proxy",
    "load_tool_policies",
]
