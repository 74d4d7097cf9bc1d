"""The crash matrix for the guarded MCP proxy (fastmcp 4.2.3, mcp 2.3.0): payments by an MCP
host (`agents/mcp_crashes.py`, the reference SDK's `mcp.Client`) whose calls go through the proxy
(`agents/mcp_crash_proxy.py`) to an upstream MCP server that charges the payments sandbox
(`agents/mcp_upstream.py`). The proxy SIGKILLs itself at random once the guard has claimed the
effect and before the call is relayed, while the upstream is charging, and after the upstream
answered, before the outcome is recorded; this test starts it again on the same port. The host
gives the model the lost connection as the call's result, and the model re-issues the call
under a new call id, in a new JSON-RPC request: MCP has no call id that survives that. The
ledger's sweep and lookups run beside it (`LedgerWorker`).

The call is named by its run and position (`effectledger/position`: the user's turn) and the
ledger keys it by them and its arguments (ADR 0018), so the re-issued call meets its effect,
waits for the ledger to settle it and gets its result. The verdict is the other frameworks'
(`crashes.py`). The suite runs two corners at 14 payments; `make crashtest-frameworks` all four
at size. With `--crash-identity=call_id` the host sends the model's call id instead, the
control: each re-issue is a new effect, and the matrix finds the extra charges.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastmcp import Client as FastMCPClient
from ledger_client import AsyncLedger
from ledger_client.adapters.mcp import (
    META_CALL_ID,
    META_POSITION,
    META_RUN_ID,
    ToolRoute,
    guarded_proxy,
)

from tests.adapters import crashes
from tests.adapters.agents import mcp_crashes as host
from tests.adapters.conftest import AGENTS, Stage
from tests.helpers import ROOT

SUITE_PAYMENTS = 14  # no SIGKILL at all in a corner: 0.61 ** 14, about 1 in 1,000


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    crashes.parametrize(metafunc)


@pytest.fixture
def size(request: pytest.FixtureRequest) -> tuple[int, str, str]:
    return crashes.size(request.config, SUITE_PAYMENTS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int, process: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}: {log.read_text()}")


def serve(stage: Stage, log: Path, argv: list[str], port: int, **env: str) -> subprocess.Popen[str]:
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, *argv], env=stage.env(**env), cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    listening(port, process, log)
    return process


class RestartingProxy:
    """The proxy process, started again on the same port each time it is killed, as a process
    supervisor would; counts the kills by place from each life's output."""

    def __init__(self, stage: Stage, workdir: Path, upstream: str, kill_p: str) -> None:
        self.stage, self.workdir, self.upstream, self.kill_p = stage, workdir, upstream, kill_p
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.kills: Counter[str] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._process = self._start(0)
        self._thread = threading.Thread(target=self._supervise, name="proxy", daemon=True)
        self._thread.start()

    def _start(self, life: int) -> subprocess.Popen[str]:
        argv = [str(AGENTS / "mcp_crash_proxy.py"), str(self.port), self.upstream]
        log = self.workdir / f"proxy-{life}.log"
        return serve(
            self.stage, log, argv, self.port, MCP_KILL_P=self.kill_p,
            EFFECT_LEDGER_LEASE_SECONDS="2", CRASH_TOOLS_TOML=str(self.workdir / "tools.toml"),
        )  # fmt: skip

    def _supervise(self) -> None:
        life = 0
        while not self._stop.is_set():
            code = self._process.wait()
            log = (self.workdir / f"proxy-{life}.log").read_text()
            self.kills.update(line.split()[1] for line in log.splitlines() if line[:5] == "KILL ")
            if self._stop.is_set():
                return
            if code != -9:
                self.errors.append(log[-3000:])
                return
            life += 1
            try:
                self._process = self._start(life)
            except AssertionError as exc:
                self.errors.append(str(exc))
                return

    def stop(self) -> None:
        self._stop.set()
        self._process.kill()
        self._thread.join(30)
        assert not self.errors, self.errors


@pytest.fixture
def upstream(stage: Stage, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    argv = [str(AGENTS / "mcp_upstream.py"), "--http", str(port)]
    process = serve(stage, tmp_path / "upstream.log", argv, port)
    yield f"http://127.0.0.1:{port}/mcp"
    process.kill()
    process.wait()


def told(conversations: host.Conversations, payments: int) -> crashes.Told:
    """The last tool result each conversation's model was given: its text, and whether it was a
    result rather than an error."""
    last = {i: host.results(conversations.load(i))[-1] for i in range(payments)}
    return {i: (message["text"], not message["error"]) for i, message in last.items()}


def test_sigkills_of_the_proxy_with_calls_reissued_under_new_ids_charge_each_payment_once(
    stage, ledger_worker, upstream, tmp_path, mode, latency_ms, size
):
    payments, kill_p, identity = size
    crashes.set_corner(stage, tmp_path, mode, latency_ms)
    store = tmp_path / "conversations"
    proxy = RestartingProxy(stage, tmp_path, upstream, kill_p)
    try:
        done = stage.run_python(
            Path(host.__file__), str(store), proxy.url, "0", str(payments),
            timeout=1800, MCP_IDENTITY=identity,
        )  # fmt: skip
    finally:
        proxy.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    conversations = host.Conversations(store)
    assert all(host.ended(conversations.load(i)) for i in range(payments))
    counts = crashes.verdict(stage, payments, told(conversations, payments))

    print(crashes.report("mcp", size, (mode, latency_ms), proxy.kills, counts))
    assert sum(proxy.kills.values()) > 0  # the crashes happened
    crashes.assert_no_loss_and_no_repeat(counts, payments)


def test_a_call_reissued_at_its_position_under_new_ids_is_one_effect(stage, upstream):
    """Without the crash: the same call at the same position, sent in new sessions under new
    call ids, reaches the upstream once; other arguments at that position are another effect;
    by call id alone, a new call id is a new effect (what the matrix's control runs into)."""
    first = {"amount": "5.00", "currency": "EUR", "account": "acct_1"}
    other = {**first, "amount": "6.00"}
    at = {META_RUN_ID: "run-1", META_POSITION: "turn-1"}
    calls = [
        (first, {**at, META_CALL_ID: "call_a"}),
        (first, {**at, META_CALL_ID: "call_b"}),
        (other, at),
        (first, {META_RUN_ID: "run-2", META_CALL_ID: "call_a"}),
        (first, {META_RUN_ID: "run-2", META_CALL_ID: "call_b"}),
    ]

    async def go() -> list[str]:
        async with AsyncLedger(stage.url, stage.key, owner="mcp-proxy") as ledger:
            routes = {"charge_card": ToolRoute(target="{account}")}
            tools = ROOT / "tools.toml"
            proxy = guarded_proxy(upstream, tools_toml=tools, ledger=ledger, routes=routes)
            ids = []
            for args, meta in calls:
                async with FastMCPClient(proxy) as client:
                    done = await client.call_tool("charge_card", args, meta=meta)
                ids.append(done.structured_content["id"])
            return ids

    ids = asyncio.run(go())
    assert ids[0] == ids[1] != ids[2]  # one effect at the position per request
    assert ids[3] != ids[4]  # a new call id, a new effect
    assert len(stage.charges()) == 4
    assert {e.run_id for e in stage.effects("charge_card")} == {"run-1", "run-2"}
    assert len(stage.effects("charge_card")) == 4
