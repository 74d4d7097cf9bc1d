"""The lost-window drills: the database goes back in time under load, and nothing is done twice.

failover-async  A primary and an asynchronous streaming standby (`devstack.drills.replica`).
                Mid-load the standby stops receiving (it falls behind, as an asynchronous one
                does, here for seconds), the load goes on, the primary is SIGKILLed and fenced,
                and the standby promoted: what the primary committed since is gone.
restore         A base backup of the primary is taken mid-load; the load goes on; the primary is
                SIGKILLed and fenced, and the backup started in its place (a restore).

Both run paying agents (`devstack.drills.payagents`) against three sandbox payments providers,
one per kind of tool: one that honours idempotency keys, one that ignores them but can be looked
up by the key kept as a reference, and one with neither, settled by final statements. In the
window that will be lost an operator refunds part of some charges, a tool is halted and an
agent's key revoked; each writes the witness (`LEDGER_WITNESS_PATH`) as it commits. After the
switch, no process is restarted: the first request a web worker serves on the new server
compares the database with the witness (`ledger.restore.incarnation`) and enters restore mode
(the promoted standby is on a newer timeline than an asynchronous primary's witness; the
restored backup is behind the witness's sequences). The agents then replay their journals (every
run posted again), the operator refunds the same charges again, and final statements of the
statement provider are imported as an operator would, until every run has ended.

The rule, counted on the providers' own records:
- 0 duplicates: no account charged twice, no charge refunded twice;
- 0 unaccounted: every charge and refund a provider holds is an effect's (by provider reference
  or idempotency key) or an incident's;
- 0 lost: every run an agent was told was confirmed, and every refund decided, ends confirmed;
- the halt is in force again, the revoked key refused again, and `verifyledger` passes.

The last line printed is `drill NAME: acknowledged N, lost L, duplicates D, unaccounted U`.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import httpx
import psycopg

from devstack.drills.accounting import score
from devstack.drills.environment import drill_environment
from devstack.drills.failover import _kill_primary
from devstack.drills.load import Api, Call
from devstack.drills.payagents import PayAgent, on_threads
from devstack.drills.replica import ReplicaPair
from devstack.drills.report import DrillReport
from devstack.drills.servers import RestartableRedis
from devstack.drills.services import SERVICES, DrillStack
from devstack.provision import fresh_database, manage
from devstack.sandbox.launch import SandboxProcess
from reconcilers.providers.sandbox_payments.statement import fetch_sandbox_statement

OPERATOR = "drill-operator"
AGENTS = ("lostwindow", "lostwindow-revoked")
# The agents' longest lease, and so how far restore mode reaches back (LEDGER_MAX_LEASE_SECONDS).
MAX_LEASE = 10
SETTLE, SKEW = 3, 1  # the charge tools' settle_after and the statement tool's statement_skew
HALTED_TOOL = "wire_transfer"
REFUNDS_PER_TOOL = 2
WAIT_FOR_MODE = 150.0  # the sweep runs each minute; the scheduler looks every 30 s

# Each kind of provider: the sandbox's options, and its charge tool's declaration. The sandbox
# runs on the ledger's clock: a skew of a second, where the default allows five minutes, lets
# the restore sweep list the window (and the mode end) within the drill.
_COMMON = f'settle_after = "{SETTLE}s"\n'
_SKEW = f'statement_skew = "{SKEW}s"\n'
PROVIDERS: dict[str, tuple[tuple[str, ...], str]] = {
    "keys": (
        (),
        'preset = "idempotent"\nhas_lookup = true\nkey_ttl = "24h"\n' + _SKEW,
    ),
    "lookup": (
        ("--reference-only",),
        'preset = "lookup"\ncall_timeout = "2s"\nsearch_lag = "0s"\n'
        'lookup_proves_absence = true\nlookup_horizon = "1h"\n' + _SKEW,
    ),
    "statement": (
        ("--ignore-keys",),
        'preset = "unsafe"\nstatements = true\namount_path = "amount"\ncurrency_path = "currency"\n'
        f'amount_unit = "major"\nstatement_reference = "idempotency_key"\n'
        f'statement_skew = "{SKEW}s"\n',
    ),
}
REFUNDED = ("keys", "lookup")  # the kinds whose charges an operator refunds
WAITING = ("review", "interrupted", "timeout")  # the runs a replay picks up again


def charge_tool(kind: str) -> str:
    return f"charge_{kind}"


class LostWindowStack(DrillStack):
    """The drill stack with three providers and the drill's tools."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        super().__init__(workdir, env)
        self.providers = {
            kind: SandboxProcess(
                "payments", workdir / f"{kind}.sqlite3", workdir / f"{kind}.log", args, env
            )
            for kind, (args, _) in PROVIDERS.items()
        }

    def _tools(self) -> Path:
        blocks = []
        for kind, (_, declaration) in PROVIDERS.items():
            url = self.providers[kind].url
            config = f'reconciler_config = {{ base_url = "{url}", timeout = 3 }}\n'
            reconciler = (
                'reconciler = "manual"\n'
                if kind == "statement"
                else (f'reconciler = "sandbox_payments"\n{config}')
            )
            refund = f'compensated_by = "refund_{kind}"\n' if kind in REFUNDED else ""
            blocks.append(
                f"[tools.{charge_tool(kind)}]\n{declaration}{_COMMON}{refund}{reconciler}"
            )
            if kind in REFUNDED:
                blocks.append(f"[tools.refund_{kind}]\n{declaration}{_COMMON}{reconciler}")
        blocks.append(f'[tools.{HALTED_TOOL}]\npreset = "unsafe"\nreconciler = "manual"\n')
        path = self.workdir / "tools.toml"
        path.write_text("\n".join(blocks))
        return path

    def prepare(self) -> str:
        raise NotImplementedError("use prepare_all")

    def prepare_all(self) -> list[str]:
        for provider in self.providers.values():
            provider.start()
        fresh, keys = fresh_database(self.env, "lostwindow", tools=self._tools(), agents=AGENTS)
        self.env.update(fresh)
        manage(self.env, "createoperator", OPERATOR, stdin="drill-operator-passphrase-9\n")
        return keys

    def stop(self) -> None:
        super().stop()
        for provider in self.providers.values():
            provider.kill()


@dataclass
class Window:
    """What happened in the window the database will lose."""

    refunds: list[dict[str, Any]]
    revoked_key: str
    cut_at: float


class LostWindowDrill:
    def __init__(self, name: str, workdir: Path, seconds: float, clients: int, progress: TextIO):
        self.name, self.workdir, self.seconds, self.progress = name, workdir, seconds, progress
        self.report = DrillReport(name)
        self.pair = ReplicaPair()
        self.redis = RestartableRedis(
            Path(tempfile.mkdtemp(prefix="lostwindow-redis-", dir=workdir))
        )
        self.calls: list[Call] = []
        self.clients = max(clients // len(PROVIDERS), 1)
        self.stack: LostWindowStack | None = None
        self.agents: list[PayAgent] = []

    def say(self, message: str) -> None:
        print(f"[faultdrill] {self.name}: {message}", file=self.progress, flush=True)

    @property
    def env(self) -> dict[str, str]:
        assert self.stack is not None
        return self.stack.env

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.env["DATABASE_URL"], autocommit=True, connect_timeout=5) as c:
            return c.execute(query, params).fetchall()

    # --- the servers ---------------------------------------------------------------------------

    def start(self) -> list[str]:
        self.pair.start_primary()
        if self.name == "failover-async":
            self.pair.clone_standby()
            self.pair.start_standby()
            self.pair.wait_streaming(state="async")
        env = drill_environment(
            self.pair.multi_host_url("postgres"),
            self.redis.start(),
            LEDGER_WITNESS_PATH=str(self.workdir / "witness" / "ledger-witness.json"),
            LEDGER_MAX_LEASE_SECONDS=str(MAX_LEASE),
            LEDGER_DEFAULT_LEASE_SECONDS=str(MAX_LEASE),
        )
        self.stack = LostWindowStack(self.workdir, env)
        keys = self.stack.prepare_all()
        self.stack.start()  # each web worker writes the witness as it starts
        return keys

    def cut(self) -> None:
        """From here on, what the primary commits will be lost."""
        if self.name == "failover-async":
            self.pair.standby.stop("fast")  # it falls behind; started again, it cannot catch up
        else:
            self.pair.back_up()

    def switch(self) -> None:
        _kill_primary(self.pair)
        if self.name == "failover-async":
            self.pair.standby.start()
            self.pair.promote_standby()
        else:
            self.pair.standby.start()

    # --- the window ----------------------------------------------------------------------------

    def operator_refunds(self, effect_ids: list[str]) -> list[dict[str, Any]]:
        code = f"from devstack.drills.operator import main; main({effect_ids!r}, {OPERATOR!r})"
        return json.loads(manage(self.env, "shell", "-c", code).strip().splitlines()[-1])

    def refundable(self) -> list[str]:
        chosen: list[str] = []
        for kind in REFUNDED:
            rows = self.sql(
                "SELECT id::text FROM ledger_effect WHERE tool = %s AND status = 'confirmed' "
                "AND kind = 'action' ORDER BY updated_at LIMIT %s",
                [charge_tool(kind), REFUNDS_PER_TOOL],
            )
            chosen += [r[0] for r in rows]
        return chosen

    def wait_refunds(self, refunds: list[dict[str, Any]], timeout: float = 60.0) -> dict[str, str]:
        ids = [r["compensation"] for r in refunds if "compensation" in r]
        deadline = time.monotonic() + timeout
        while True:
            rows = dict(self.sql(
                "SELECT id::text, status FROM ledger_effect WHERE id = ANY(%s::uuid[])", [ids]
            ))  # fmt: skip
            if all(s in ("confirmed", "failed") for s in rows.values()) and len(rows) == len(ids):
                return rows
            if time.monotonic() > deadline:
                return rows
            time.sleep(0.5)

    def in_window(self, keys: list[str]) -> Window:
        started = time.monotonic()
        refunds = self.operator_refunds(self.refundable())
        self.wait_refunds(refunds, timeout=self.seconds * 0.2)
        manage(self.env, "halt", "--tool", HALTED_TOOL, "--reason", "Drill: halted in the window")
        prefix = self.sql(
            "SELECT k.prefix FROM ledger_apikey k JOIN ledger_agent a ON a.id = k.agent_id "
            "WHERE a.name = %s", [AGENTS[1]],
        )[0][0]  # fmt: skip
        manage(self.env, "revokekey", prefix)
        # The halt and the revocation wrote the witness as they committed.
        time.sleep(max(0.0, self.seconds * 0.3 - (time.monotonic() - started)))
        return Window(refunds, keys[1], started)

    # --- after the switch ----------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        assert self.stack is not None
        try:
            return httpx.get(f"{self.stack.api_url}/health", timeout=5, trust_env=False).json()
        except (httpx.HTTPError, ValueError):
            return {}

    def wait_mode(self, on: bool, timeout: float) -> float | None:
        """Seconds until /health reports restore mode `on` (None: it did not)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if bool(self.health().get("restore_mode")) == on:
                return round(time.monotonic() - started, 1)
            time.sleep(1.0)
        return None

    def on_agents(self, work: Callable[[PayAgent], None], seconds: float = 120.0) -> None:
        for agent in self.agents:
            agent.give_up_at = time.monotonic() + seconds
        for thread in on_threads(self.agents, work):
            thread.join(seconds + 30)

    def import_statement(self, period_start: Any) -> int:
        """The statement provider's statement of [period_start, now), imported as final once
        every dispatch window and the restore window's reach have settled."""
        assert self.stack is not None
        rows = self.sql(
            "SELECT greatest("
            "  (SELECT max(created_at) FROM ledger_effectevent WHERE to_status = 'dispatching'),"
            "  (SELECT max(started_at) FROM ledger_restorewindow) + %s) + %s",
            [timedelta(seconds=MAX_LEASE), timedelta(seconds=MAX_LEASE + SETTLE + 2 * SKEW)],
        )
        settled = rows[0][0]
        while self.sql("SELECT now()")[0][0] <= settled:
            time.sleep(0.5)
        period_end = self.sql("SELECT now()")[0][0]
        url = self.stack.providers["statement"].url
        filename, content = fetch_sandbox_statement(url, period_start, period_end, timeout=10.0)
        path = self.workdir / filename
        path.write_bytes(content)
        start, end = period_start.isoformat(), period_end.isoformat()
        manage(
            self.env, "importstatement", charge_tool("statement"), str(path),
            "--period-start", start, "--period-end", end,
        )  # fmt: skip
        return max(0, len(content.splitlines()) - 1)

    def run(self) -> DrillReport:
        try:
            self._run()
        finally:
            if self.stack is not None:
                self.stack.stop()
            self.redis.stop()
            self.pair.close()
        return self.report

    def _run(self) -> None:
        keys = self.start()
        assert self.stack is not None
        began = self.sql("SELECT now() - interval '1 minute'")[0][0]
        before = self.stack.pids()
        self.agents = [
            PayAgent(f"{kind}{n}", charge_tool(kind), self.stack.providers[kind].url,
                     Api(self.stack.api_url, keys[0], self.calls))
            for kind in PROVIDERS for n in range(self.clients)
        ]  # fmt: skip
        self.say(f"{len(self.agents)} paying agents for {self.seconds:.0f} s")
        stopping = threading.Event()
        threads = on_threads(self.agents, lambda agent: agent.new_runs(stopping, self.name[:2]))
        time.sleep(self.seconds * 0.4)
        self.cut()
        self.say("cut: from here on the primary's commits will be lost")
        window = self.in_window(keys)
        self.switch()
        switched = time.time()
        self.say("primary killed and fenced; the second cluster is the primary now")
        stopping.set()
        for agent in self.agents:
            agent.give_up_at = time.monotonic() + 60
        for thread in threads:
            thread.join(90)
        self.wait_mode(True, WAIT_FOR_MODE)
        entered = self.sql("SELECT extract(epoch FROM min(started_at)) FROM ledger_restorewindow")
        self.report.counts["restore mode entered after (s)"] = (
            round(float(entered[0][0]) - switched, 1) if entered[0][0] is not None else None
        )
        self.say("restore mode is on; the agents replay their journals")
        self.on_agents(lambda agent: agent.replay())
        again = self.operator_refunds([r["effect"] for r in window.refunds])
        self.wait_refunds(again)
        for round_ in (1, 2):
            lines = self.import_statement(began)
            self.say(f"final statement {round_} imported ({lines} lines); replaying what waits")
            self.on_agents(lambda agent: agent.replay(WAITING))
        self._until_every_run_ended()
        self.report.counts["restore mode ended after (s)"] = self.wait_mode(False, WAIT_FOR_MODE)
        score(self, window, again, keys)
        now = self.stack.pids()
        self.report.counts["processes restarted"] = sum(
            1 for name in SERVICES if now[name] != before[name] or not self.stack.alive(name)
        )
        self.report.expect_count("processes restarted", 0)

    def _until_every_run_ended(self, seconds: float = 150.0) -> None:
        """As an orchestrator retries a step later: replay what still waits every few seconds
        (an effect in doubt whose lookup runs at the next minute's sweep) until every run has
        ended, or for `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(
            run.state in WAITING for agent in self.agents for run in agent.journal
        ):
            time.sleep(5)
            self.on_agents(lambda agent: agent.replay(WAITING), seconds=60)

    # --- the verdict ---------------------------------------------------------------------------


def lost_window(
    name: str, workdir: Path, seconds: float, clients: int, progress: TextIO
) -> DrillReport:
    return LostWindowDrill(name, workdir, seconds, clients, progress).run()
