"""The guarded MCP proxy (ledger_client.adapters.mcp, on fastmcp's proxy) against a real
upstream MCP server process whose tools charge the payments sandbox and send messages, the
real ledger, and real MCP client sessions.

The proxy runs in the test process (an in-memory client session) where the test needs no
transport, and as a process of its own over Streamable HTTP where it is killed or where a
client gives up on a response.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fastmcp import Client
from fastmcp.client.client import CallToolResult
from ledger_client import AsyncLedger
from ledger_client.adapters.mcp import (
    META_CALL_ID,
    META_EFFECT_ID,
    META_REPLAYED,
    META_RUN_ID,
    META_STATUS,
    ToolRoute,
    guarded_proxy,
    load_tool_policies,
)
from ledger_client.adapters.mcp_schema import with_defaults

from tests.adapters.conftest import AGENTS, Stage
from tests.helpers import ROOT, expire_lease

TOOLS = ROOT / "tools.toml"
UPSTREAM = AGENTS / "mcp_upstream.py"
PROXY = AGENTS / "mcp_proxy.py"
CHARGE = {"amount": "25.00", "currency": "EUR", "account": "acct_1"}
MESSAGE = {"to": "ops@example.com", "subject": "Paid", "body": "Order 1 is paid."}
# The effect's target is what the provider acts on (the ledger's lookups compare it).
ROUTES = {"charge_card": ToolRoute(target="{account}"), "send_email": ToolRoute(target="{to}")}
T = TypeVar("T")


# --- Processes ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Process = subprocess.Popen[bytes]


def _serve(
    stage: Stage, log: Path, argv: Callable[[int], list[str]], **env: str
) -> tuple[Process, str]:
    """Start an MCP server process on a free port; (the process, its /mcp URL) once it listens.
    `argv(port)` is its command line after the interpreter."""
    port = _free_port()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, *argv(port)],
            env=stage.env(**env),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}/mcp"
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"{argv(port)} did not listen: {log.read_text()}")


@dataclass
class Upstream:
    url: str
    process: Process
    log: Path
    control_file: Path

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """Every tool invocation that reached the upstream server."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        calls = [json.loads(line) for line in lines]
        return [c for c in calls if tool is None or c["tool"] == tool]

    def control(self, **settings: Any) -> None:
        self.control_file.write_text(json.dumps(settings))


@pytest.fixture
def upstream(stage: Stage, tmp_path: Path) -> Iterator[Upstream]:
    log, control = tmp_path / "upstream-calls.jsonl", tmp_path / "upstream-control.json"
    process, url = _serve(
        stage,
        tmp_path / "upstream.log",
        lambda port: [str(UPSTREAM), "--http", str(port)],
        MCP_UPSTREAM_LOG=str(log),
        MCP_UPSTREAM_CONTROL=str(control),
    )
    yield Upstream(url, process, log, control)
    process.kill()
    process.wait()


def _proxy_process(
    stage: Stage, upstream: Upstream, log: Path, *options: str
) -> tuple[Process, str]:
    return _serve(stage, log, lambda port: [str(PROXY), str(port), upstream.url, *options])


# --- Clients -----------------------------------------------------------------------------------


def identity(run_id: str, call_id: str | None = None) -> dict[str, Any]:
    meta = {META_RUN_ID: run_id}
    return meta if call_id is None else {**meta, META_CALL_ID: call_id}


def text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def _call(client: Client[Any], tool: str, args: dict[str, Any], meta: Any = None) -> Any:
    return await client.call_tool(tool, args, meta=meta, raise_on_error=False)


def over_http(url: str, tool: str, args: dict[str, Any], meta: Any, **kw: Any) -> CallToolResult:
    """One call in a fresh client session over Streamable HTTP."""

    async def go() -> CallToolResult:
        async with Client(url) as client:
            return await client.call_tool(tool, args, meta=meta, raise_on_error=False, **kw)

    return asyncio.run(go())


def through_proxy(
    stage: Stage,
    upstream: Upstream,
    session: Callable[[Client[Any]], Awaitable[T]],
    *,
    ledger_url: str | None = None,
    **guard: Any,
) -> T:
    """Run `session` against a guarded proxy of `upstream` in this process."""

    async def go() -> T:
        url = ledger_url or stage.url
        async with AsyncLedger(url, stage.key, owner="mcp-proxy", retries=0) as ledger:
            guard.setdefault("tools_toml", TOOLS)
            guard.setdefault("routes", ROUTES)
            proxy = guarded_proxy(upstream.url, ledger=ledger, **guard)
            async with Client(proxy) as client:
                return await session(client)

    return asyncio.run(go())


def wait_until(check: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# --- Tests -------------------------------------------------------------------------------------


def test_proxy_killed_after_the_charge_the_retry_charges_nothing_more(
    stage, upstream, tmp_path, ledger_worker
):
    marker = tmp_path / "charged.json"
    upstream.control(hang_after_charge=str(marker))
    process, url = _proxy_process(stage, upstream, tmp_path / "proxy-1.log")
    meta = identity("run-crash", "call-1")
    outcome: list[Any] = []
    first = threading.Thread(target=lambda: outcome.append(_attempt(url, meta)), daemon=True)
    first.start()
    wait_until(marker.exists)  # the provider committed; the outcome is not recorded yet
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    first.join(20)
    assert outcome and isinstance(outcome[0], BaseException), outcome
    [effect] = stage.effects("charge_card")
    assert effect.status == "dispatching"
    assert len(stage.charges()) == 1

    upstream.control()
    process, url = _proxy_process(stage, upstream, tmp_path / "proxy-2.log", "--in-flight-wait=0")
    try:
        # The dead proxy's lease runs out meanwhile: the retry waits for the ledger to settle
        # the effect (by lookup at the provider) and answers from its record.
        expire_lease(str(effect.id))
        done = over_http(url, "charge_card", CHARGE, meta, timeout=60)
    finally:
        process.kill()
        process.wait()
    assert not done.is_error, text(done)
    assert done.meta[META_REPLAYED] is True
    [charge] = stage.charges()
    assert charge["id"] in text(done)
    assert charge["received_idempotency_key"] == effect.idempotency_key
    assert len(upstream.calls("charge_card")) == 1


def _attempt(url: str, meta: dict[str, Any]) -> Any:
    try:
        return over_http(url, "charge_card", CHARGE, meta, timeout=30)
    except BaseException as exc:  # the proxy died under the call
        return exc


def test_a_dropped_response_retried_at_once_reaches_the_upstream_once(stage, upstream, tmp_path):
    upstream.control(delay_after_charge=1.5)
    key_argument = "--key-argument=charge_card=idempotency_key"
    process, url = _proxy_process(stage, upstream, tmp_path / "proxy.log", key_argument)
    meta = identity("run-drop", "call-1")
    try:
        with pytest.raises(Exception):  # noqa: B017 - the client gives up: the response is lost
            over_http(url, "charge_card", CHARGE, meta, timeout=0.4)
        retried = over_http(url, "charge_card", CHARGE, meta)  # waits for the call in flight
        again = over_http(url, "charge_card", CHARGE, meta)
    finally:
        process.kill()
        process.wait()
    [charge] = stage.charges()
    for result in (retried, again):
        assert not result.is_error, text(result)
        assert result.structured_content["id"] == charge["id"]
        assert result.meta[META_REPLAYED] is True
    assert len(upstream.calls("charge_card")) == 1
    [effect] = stage.effects("charge_card")
    assert (effect.status, effect.provider_ref) == ("confirmed", charge["id"])
    # the key went as the configured argument, and the upstream passed it on
    assert upstream.calls("charge_card")[0]["key"] == effect.idempotency_key
    assert charge["received_idempotency_key"] == effect.idempotency_key


def test_above_approve_above_it_waits_for_the_operator(stage, upstream):
    stage.hold_above("100.00")
    big = {**CHARGE, "amount": "150.00"}

    async def ask(client: Client[Any]) -> list[Any]:
        return [
            await _call(client, "charge_card", big, identity("run-big", "approved")),
            await _call(client, "charge_card", big, identity("run-big", "rejected")),
        ]

    held = through_proxy(stage, upstream, ask)
    effects = {e.step_id: e for e in stage.effects("charge_card")}
    for result, step in zip(held, ("approved", "rejected"), strict=True):
        assert result.is_error
        assert text(result).startswith(f"awaiting approval (effect {effects[step].id})")
        assert result.meta[META_STATUS] == "awaiting_approval"
        assert result.meta[META_EFFECT_ID] == str(effects[step].id)
    assert (stage.charges(), upstream.calls()) == ([], [])

    stage.approve(effects["approved"].id)
    stage.reject(effects["rejected"].id)
    again = through_proxy(stage, upstream, ask)
    assert not again[0].is_error, text(again[0])
    assert again[1].is_error and "cancelled" in text(again[1]), text(again[1])
    [charge] = stage.charges()
    assert charge["amount"] == "150.00"
    assert len(upstream.calls("charge_card")) == 1
    statuses = {e.step_id: e.status for e in stage.effects("charge_card")}
    assert statuses == {"approved": "confirmed", "rejected": "cancelled"}


def test_the_tool_list_is_the_upstreams_and_its_hints_decide_nothing(stage, upstream):
    async def session(client: Client[Any]) -> tuple[Any, ...]:
        async with Client(upstream.url) as direct:
            upstream_tools = [t.model_dump(by_alias=True) for t in await direct.list_tools()]
        proxied = [t.model_dump(by_alias=True) for t in await client.list_tools()]
        assert proxied == upstream_tools  # names, descriptions, schemas, hints, _meta
        balance = await _call(client, "get_balance", {})  # no identity: not guarded
        unnamed = await _call(client, "send_email", MESSAGE)
        sent = await _call(client, "send_email", MESSAGE, identity("run-mail", "call-1"))
        again = await _call(client, "send_email", MESSAGE, identity("run-mail", "call-1"))
        return proxied, balance, unnamed, sent, again

    listed, balance, unnamed, sent, again = through_proxy(stage, upstream, session)
    hints = {t["name"]: t["annotations"] for t in listed}
    assert [*hints] == ["charge_card", "charge_in_euros", "send_email", "get_balance"]
    # The upstream says get_balance destroys and send_email only reads; tools.toml decides.
    assert hints["get_balance"]["destructiveHint"] and hints["send_email"]["readOnlyHint"]
    assert not balance.is_error and "available" in balance.structured_content
    assert unnamed.is_error and "missing identity" in text(unnamed)
    assert not sent.is_error and sent.meta[META_REPLAYED] is False
    assert not again.is_error and again.meta[META_REPLAYED] is True
    assert again.structured_content == sent.structured_content
    [effect] = stage.effects()
    assert (effect.tool, effect.status) == ("send_email", "confirmed")
    [message] = stage.messages()
    assert sent.structured_content["id"] == message["id"] == effect.provider_ref
    assert len(upstream.calls("get_balance")) == 1
    [call] = upstream.calls("send_email")
    assert call["key"] == effect.idempotency_key  # in the relayed request's _meta


def test_bad_input_is_refused_before_anything_is_written(stage, upstream, tmp_path):
    named = identity("run-bad", "call-1")
    cases = {
        "no identity": ("charge_card", CHARGE, None, "missing identity"),
        "no call id": ("charge_card", CHARGE, identity("run-bad"), "missing identity"),
        "schema": ("charge_card", {**CHARGE, "amount": 25}, named, "input schema"),
        "unknown tool": ("wire_money", CHARGE, named, "Unknown tool"),
    }
    process, url = _proxy_process(stage, upstream, tmp_path / "proxy.log")
    try:
        results = {case: over_http(url, *call[:3]) for case, call in cases.items()}
        # Valid JSON that has no canonical form: 1e400 is read as infinity.
        unreadable = raw_call(url, "charge_card", '{"amount": 1e400, "currency": "EUR"}', named)
    finally:
        process.kill()
        process.wait()
    for case, (*_, expected) in cases.items():
        assert results[case].is_error and expected in text(results[case]), (case, results[case])
        assert "Nothing was run" in text(results[case])
    assert unreadable["isError"] is True, unreadable
    assert "argument 'amount': inf has no JSON form" in unreadable["content"][0]["text"]

    async def down(client: Client[Any]) -> Any:
        return await _call(client, "charge_card", CHARGE, named)

    dead = f"http://127.0.0.1:{_free_port()}"
    result = through_proxy(stage, upstream, down, ledger_url=dead)
    assert result.is_error and "the ledger is unavailable" in text(result), text(result)
    assert result.meta[META_STATUS] == "ledger_unavailable"
    assert (upstream.calls(), stage.charges(), stage.effects()) == ([], [], [])


def raw_call(url: str, tool: str, arguments: str, meta: dict[str, Any]) -> dict[str, Any]:
    """A `tools/call` written by hand (MCP 2026-07-28 over Streamable HTTP), for arguments no
    SDK client would serialize."""
    modern = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test-client", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = f'{{"name": {json.dumps(tool)}, "arguments": {arguments}, '
    params += f'"_meta": {json.dumps({**meta, **modern})}}}'
    body = f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {params}}}'
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    response = httpx.post(url, content=body, headers=headers, timeout=30, trust_env=False)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert isinstance(result, dict)
    return result


def test_a_business_key_needs_only_the_run_id(stage, upstream):
    stage.key_fields("order_id")
    policies = load_tool_policies(TOOLS)
    policies["charge_card"] = replace(policies["charge_card"], key_fields=("order_id",))
    order = {**CHARGE, "order_id": "ord-7"}

    async def session(client: Client[Any]) -> list[Any]:
        return [
            await _call(client, "charge_card", order, identity("run-key")),
            await _call(client, "charge_card", order, identity("run-key", "reissued-call")),
        ]

    first, second = through_proxy(stage, upstream, session, tools_toml=policies)
    assert not first.is_error and not second.is_error, (text(first), text(second))
    assert second.meta[META_REPLAYED] is True
    [charge] = stage.charges()
    assert charge["metadata"] == {"order_id": "ord-7"}
    assert len(upstream.calls("charge_card")) == 1


def test_the_upstream_schemas_defaults_are_recorded_and_relayed(stage, upstream):
    """A call that leaves `currency` to the upstream tool's default ("EUR") is recorded with it,
    so the ledger's amount checks (four-eyes here) read it, and the upstream gets the same."""
    stage.hold_above("100.00")
    # The key argument (whose schema default is null) is the proxy's: no default for it.
    route = ToolRoute(ledger_tool="charge_card", key_argument="idempotency_key", target="{account}")
    routes = {**ROUTES, "charge_in_euros": route}
    small, big = {"amount": "25.00", "account": "acct_1"}, {"amount": "150.00", "account": "a_2"}

    async def session(client: Client[Any]) -> list[Any]:
        return [
            await _call(client, "charge_in_euros", small, identity("run-eur", "small")),
            await _call(client, "charge_in_euros", big, identity("run-eur", "big")),
        ]

    paid, held = through_proxy(stage, upstream, session, routes=routes)
    assert not paid.is_error, text(paid)
    assert held.is_error and held.meta[META_STATUS] == "awaiting_approval", text(held)
    effects = {e.step_id: e for e in stage.effects("charge_card")}
    assert effects["small"].request == {**small, "currency": "EUR", "note": None}
    assert effects["big"].request == {**big, "currency": "EUR", "note": None}
    assert effects["small"].status == "confirmed"
    [charge] = stage.charges()
    assert (charge["amount"], charge["currency"]) == ("25.00", "EUR")
    [relayed] = upstream.calls("charge_in_euros")
    assert relayed["arguments"] == {**small, "currency": "EUR", "note": None}
    assert relayed["key"] == effects["small"].idempotency_key


def test_defaults_fill_nested_objects_and_follow_local_references():
    schema = {
        "type": "object",
        "properties": {
            "currency": {"type": "string", "default": "EUR"},
            "note": {"$ref": "#/$defs/Note", "default": {"text": "paid"}},
            "idempotency_key": {"type": "string", "default": "none"},
        },
        "$defs": {"Note": {"properties": {"lang": {"default": "en"}, "text": {}}}},
    }
    skip = ("idempotency_key",)
    assert with_defaults(schema, {"amount": "1"}, skip) == {
        "amount": "1",
        "currency": "EUR",
        "note": {"text": "paid", "lang": "en"},
    }
    assert with_defaults(schema, {"currency": "USD", "note": {"text": "x"}}, skip) == {
        "currency": "USD",
        "note": {"text": "x", "lang": "en"},
    }


def test_the_example_pays_and_messages_once(stage):
    done = stage.run_python(ROOT / "examples" / "mcp" / "agent.py", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "charges at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert "messages at the provider: 1 · effects in the ledger: 1" in done.stdout
