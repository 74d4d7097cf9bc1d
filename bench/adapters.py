"""The guard's added time per agent call, per framework adapter: the same agent with its tool
guarded and unguarded, in the same run, no crashes, a provider that answers at once.

Per adapter (LangGraph with `LedgerMiddleware`, the OpenAI Agents SDK with `ledger_tool`,
Pydantic AI with `LedgerCapability`, the MCP guarded proxy, DBOS with `ledger_step`), an agent
over a scripted model makes one call of `charge_card` per run (`bench.adapters_agents`,
`bench.adapters_dbos`). Guarded, the adapter binds the call's identity, the guard records
intent+claim in the ledger, the body charges the provider with the effect's key and the guard
records the outcome; unguarded, the same agent calls the same body with a key of its own. Every
run has its own run identity, so no guarded call is a replay.

The ledger is the service as `make run` starts it (gunicorn behind nginx,
`bench.payments_ledger`), in a fresh database (`<DATABASE_URL's database>_adapters`); the
provider is `bench.payments_provider`. Rounds interleave: in each, every adapter runs its
guarded and its unguarded agent (the order of adapters and of the two alternating between
rounds), N runs each after a few untimed ones. Reported per adapter, over all rounds: wall time
per run at p50 and p99, unguarded and guarded, the added time (guarded − unguarded, at each
percentile), the rate ratio (guarded ÷ unguarded, from mean times), and CPU per run of the
agent's process and of all parties (agent, ledger web, PostgreSQL, provider) from /proc, and the
guarded run's requests to the ledger with their server time (gunicorn's access log). The load
average before and after is printed and kept: other work on the machine slows every contender
alike, but it inflates the added time too.

Goal: the guard adds at most 5 ms per call at p50. Exit status 0 also when it is missed (a
measurement); 1 when a run failed, or the ledger does not hold exactly one confirmed effect per
guarded run. The table is written to `var/bench/adapters.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.adapters_agents import (
    AgentsSdkAgent,
    LangGraphAgent,
    McpAgent,
    Provider,
    PydanticAiAgent,
    Sample,
)
from bench.adapters_dbos import DbosAgent, DbosFailed, dbos_worker, ledger_environment
from bench.cpu import CpuWindow, Parties
from bench.harness import (
    ROOT,
    bench_database,
    code_version,
    drop_quietly,
    fresh_bench_database,
    options_from,
    run_stoppable,
)
from bench.lifecycle_load import OWN_DATABASES, _is_ours
from bench.payments_ledger import AccessLog, ledger_server
from bench.payments_provider import provider_process
from bench.report import machine_info, percentile, print_grid, write_result

ADAPTERS = ("langgraph", "openai-agents", "pydantic-ai", "mcp", "dbos")
GOAL_MS = 5.0  # added time per call at p50


@dataclass(frozen=True)
class Options:
    calls: int
    rounds: int
    warmup: int
    only: str
    keep_db: bool


class Agent(Protocol):
    name: str

    def measure(self, guarded: bool, warmup: int, calls: int, tag: str) -> Sample: ...


@dataclass
class Side:
    """All rounds of one adapter's guarded or unguarded agent."""

    ms: list[float] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    runs: int = 0  # including untimed and failed ones
    cpu_agent: float = 0.0  # seconds
    cpu_all: float = 0.0
    ledger_calls: int = 0  # requests the ledger served meanwhile
    ledger_ms: float = 0.0  # their server time (gunicorn's %(D)s)

    def add(self, sample: Sample, runs: int, cpu: dict[str, float], calls: list[float]) -> None:
        self.ledger_calls += len(calls)
        self.ledger_ms += sum(calls)
        self.ms += sample.ms
        self.errors += sample.errors
        self.error_samples += sample.error_samples[: 3 - len(self.error_samples)]
        self.runs += runs
        self.cpu_agent += cpu.get("agent", 0.0)
        self.cpu_all += sum(v for k, v in cpu.items() if k not in ("other", "idle"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--calls", type=int, default=300, help="timed runs per agent and round (300)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs before each (20)")
    parser.add_argument(
        "--only",
        default=",".join(ADAPTERS),
        help=f"adapters, comma-separated ({','.join(ADAPTERS)})",
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark databases")
    # Internal: the DBOS agent runs in a child process of its own.
    parser.add_argument("--dbos-worker", metavar="SYSTEM_DB_URL", help=argparse.SUPPRESS)
    parser.add_argument("--provider", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(ADAPTERS)
    if unknown:
        parser.error(f"unknown adapters: {', '.join(sorted(unknown))}")
    if args.calls < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--calls and --rounds must be ≥ 1, --warmup ≥ 0")
    return args


# --- The benchmark ---------------------------------------------------------------------------


def make_agents(
    opts: Options, provider: Provider, ledger_url: str, key: str, stack: contextlib.ExitStack
) -> dict[str, Agent]:
    """The agents of the adapters asked for, by adapter."""
    from ledger_client import configure

    configure(ledger_url, key, owner="adapters-bench")
    ledger_environment(ledger_url, key)
    wanted = opts.only.split(",")
    agents: dict[str, Agent] = {}
    if "langgraph" in wanted:
        agents["langgraph"] = LangGraphAgent(provider)
    if "openai-agents" in wanted:
        agents["openai-agents"] = AgentsSdkAgent(provider)
    if "pydantic-ai" in wanted:
        agents["pydantic-ai"] = PydanticAiAgent(provider)
    if "mcp" in wanted:
        agents["mcp"] = McpAgent(provider, ledger_url, key)
    if "dbos" in wanted:
        dbos = DbosAgent(
            os.environ["DATABASE_URL"], provider.url.removesuffix("/charges"), opts.keep_db
        )
        stack.callback(dbos.close)
        OWN_DATABASES.add(dbos.db_name)
        agents["dbos"] = dbos
    return agents


def benchmark(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL is not set (run it through `make bench`).")
    print(
        f"Adapter benchmark: per adapter the same agent guarded and unguarded, one tool call per "
        f"run, {opts.calls} runs each per round (+{opts.warmup} untimed), {opts.rounds} "
        f"interleaved rounds; {os.cpu_count()} cores shared by all parties; load average "
        f"{os.getloadavg()[0]:.2f}.",
        flush=True,
    )
    sides: dict[tuple[str, bool], Side] = {}
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="adbench-")))
        provider_proc = stack.enter_context(provider_process())
        name = bench_database(base_url, "adapters")
        OWN_DATABASES.add(name)
        if not opts.keep_db:
            stack.callback(drop_quietly, base_url, name)
        env, (key,) = fresh_bench_database(base_url, name, ["adapters-bench"])
        server = stack.enter_context(ledger_server(env, scratch))
        print(f"Ledger: {server.label}; provider: {provider_proc.url}.", flush=True)
        provider = Provider(provider_proc.url)
        stack.callback(provider.close)
        try:
            agents = make_agents(opts, provider, server.base_url, key, stack)
        except DbosFailed as exc:
            print(f"DBOS: {exc}", file=sys.stderr)
            return 1
        watch = Watch(server.server.proc.pid, provider_proc.proc.pid, server.log)
        run = uuid.uuid4().hex[:8]
        for number in range(1, opts.rounds + 1):
            one_round(agents, sides, opts, f"ab{run}-r{number}", number, watch)
        failures = check_ledger(env["DATABASE_URL"], sides)
    return report(agents, sides, opts, failures)


def one_round(
    agents: dict[str, Agent],
    sides: dict[tuple[str, bool], Side],
    opts: Options,
    tag: str,
    number: int,
    watch: Watch,
) -> None:
    """Every adapter's two agents once, alternating the orders between rounds."""
    print(f"round {number}/{opts.rounds}", flush=True)
    order = list(agents.items()) if number % 2 else list(agents.items())[::-1]
    for adapter, agent in order:
        line = []
        for guarded in (True, False) if number % 2 else (False, True):
            agent_pid = agent.pid if isinstance(agent, DbosAgent) else os.getpid()
            window = CpuWindow(cpu_parties(agent_pid, watch.server_pgid, watch.provider_pgid))
            offset = watch.log.offset()
            window.start()
            sample = agent.measure(guarded, opts.warmup, opts.calls, f"{tag}-{adapter}-{guarded:d}")
            window.stop()
            sides.setdefault((adapter, guarded), Side()).add(
                sample, opts.warmup + opts.calls, window.seconds, ledger_calls(watch.log, offset)
            )
            p50 = percentile(sorted(sample.ms), 0.5) if sample.ms else float("nan")
            kind = "guarded" if guarded else "unguarded"
            line.append(
                f"{kind} p50 {p50:.2f} ms" + (f", {sample.errors} errors" if sample.errors else "")
            )
        print(f"  {agent.name}: " + "; ".join(line), flush=True)


@dataclass(frozen=True)
class Watch:
    """What a measurement is watched by: the processes whose CPU counts, the ledger's log."""

    server_pgid: int
    provider_pgid: int
    log: AccessLog


def ledger_calls(log: AccessLog, offset: int) -> list[float]:
    """Server ms of each request the ledger served since `offset`. gunicorn writes a line just
    after its response: read until no new line came for half a second."""
    calls = log.calls(offset)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = log.calls(offset)
        if len(again) == len(calls):
            break
        calls = again
    return [ms for _path, _status, ms in calls]


def cpu_parties(agent_pid: int, server_pgid: int, provider_pgid: int) -> Parties:
    """Who spent the CPU of a measurement: the agent's process (DBOS's worker for DBOS), the
    ledger's web (gunicorn and nginx), PostgreSQL (this run's backends and the server's own
    processes), the provider; everything else is "other"."""
    return {
        "agent": lambda p: p.pid == agent_pid,
        "ledger web": lambda p: p.pgrp == server_pgid or p.comm == "nginx",
        "postgres": lambda p: p.title.startswith("postgres") and _is_ours(p.title),
        "provider": lambda p: p.pgrp == provider_pgid,
    }


def check_ledger(url: str, sides: dict[tuple[str, bool], Side]) -> list[str]:
    """One confirmed effect per guarded run, each of a run of its own: none was a replay."""
    import psycopg

    expected = sum(side.runs - side.errors for (_, guarded), side in sides.items() if guarded)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'confirmed'), "
            "count(DISTINCT run_id) FROM ledger_effect"
        ).fetchone()
    total, confirmed, runs = row if row else (0, 0, 0)
    print(f"\nLedger: {total} effects, {confirmed} confirmed, {runs} runs; {expected} expected.")
    if total == confirmed == runs == expected:
        return []
    return [
        f"the ledger holds {total} effects ({confirmed} confirmed, {runs} runs), not {expected}"
    ]


# --- The report ------------------------------------------------------------------------------


def summary(agents: dict[str, Agent], sides: dict[tuple[str, bool], Side]) -> list[dict[str, Any]]:
    rows = []
    for adapter, agent in agents.items():
        g, u = sides[(adapter, True)], sides[(adapter, False)]
        if not g.ms or not u.ms:
            continue
        gs, us = sorted(g.ms), sorted(u.ms)
        row: dict[str, Any] = {"adapter": agent.name, "runs": len(gs)}
        for label, values in (("unguarded", us), ("guarded", gs)):
            row[f"{label}_p50_ms"] = percentile(values, 0.5)
            row[f"{label}_p99_ms"] = percentile(values, 0.99)
        row["added_p50_ms"] = row["guarded_p50_ms"] - row["unguarded_p50_ms"]
        row["added_p99_ms"] = row["guarded_p99_ms"] - row["unguarded_p99_ms"]
        row["rate_ratio"] = (sum(us) / len(us)) / (sum(gs) / len(gs))
        row["cpu_agent_ms_unguarded"] = 1000 * u.cpu_agent / u.runs
        row["cpu_agent_ms_guarded"] = 1000 * g.cpu_agent / g.runs
        row["cpu_all_ms_unguarded"] = 1000 * u.cpu_all / u.runs
        row["cpu_all_ms_guarded"] = 1000 * g.cpu_all / g.runs
        row["ledger_calls_per_run"] = g.ledger_calls / g.runs
        row["ledger_server_ms_per_run"] = g.ledger_ms / g.runs
        row["goal_met"] = row["added_p50_ms"] <= GOAL_MS
        rows.append(row)
    return rows


def print_tables(rows: list[dict[str, Any]]) -> None:
    print("\nWall time per agent run (one tool call), ms; over all rounds:\n")
    print_grid(
        [
            "adapter",
            "runs",
            "unguarded p50",
            "p99",
            "guarded p50",
            "p99",
            "added p50",
            "added p99",
            "rate g÷u",
            f"added p50 ≤ {GOAL_MS:g} ms",
        ],
        [
            [
                r["adapter"],
                r["runs"],
                f"{r['unguarded_p50_ms']:.2f}",
                f"{r['unguarded_p99_ms']:.2f}",
                f"{r['guarded_p50_ms']:.2f}",
                f"{r['guarded_p99_ms']:.2f}",
                f"{r['added_p50_ms']:+.2f}",
                f"{r['added_p99_ms']:+.2f}",
                f"{r['rate_ratio']:.2f}",
                "met" if r["goal_met"] else "missed",
            ]
            for r in rows
        ],
        right_align=True,
    )
    print(
        "\nPer run, ms: CPU of the agent's process and of all parties (agent, ledger web, "
        "PostgreSQL, provider); the guarded run's requests to the ledger and their server time:\n"
    )
    print_grid(
        [
            "adapter",
            "agent unguarded",
            "agent guarded",
            "all unguarded",
            "all guarded",
            "all added",
            "ledger calls",
            "ledger server ms",
        ],
        [
            [
                r["adapter"],
                f"{r['cpu_agent_ms_unguarded']:.2f}",
                f"{r['cpu_agent_ms_guarded']:.2f}",
                f"{r['cpu_all_ms_unguarded']:.2f}",
                f"{r['cpu_all_ms_guarded']:.2f}",
                f"{r['cpu_all_ms_guarded'] - r['cpu_all_ms_unguarded']:+.2f}",
                f"{r['ledger_calls_per_run']:.2f}",
                f"{r['ledger_server_ms_per_run']:.2f}",
            ]
            for r in rows
        ],
        right_align=True,
    )
    print(
        "\nadded = guarded − unguarded at the same percentile (not a percentile of differences); "
        "rate g÷u = mean unguarded time ÷ mean guarded time. CPU and ledger calls count "
        "warm-up runs too."
    )


def report(
    agents: dict[str, Agent],
    sides: dict[tuple[str, bool], Side],
    opts: Options,
    failures: list[str],
) -> int:
    rows = summary(agents, sides)
    print_tables(rows)
    print(f"Load average (1 min) at the end: {os.getloadavg()[0]:.2f}.")
    for (adapter, guarded), side in sides.items():
        if side.errors:
            kind = "guarded" if guarded else "unguarded"
            failures.append(f"{adapter} {kind}: {side.errors} failed runs")
            for sample in side.error_samples:
                print(f"  {adapter} {kind} error: {sample}", file=sys.stderr)
    config = {
        "calls_per_round": opts.calls,
        "rounds": opts.rounds,
        "warmup_runs": opts.warmup,
        "goal_added_p50_ms": GOAL_MS,
        "provider": "bench/payments_provider.py, answers at once",
        "ledger": "gunicorn behind nginx, as `make run`",
        "load_average_1min_at_end": os.getloadavg()[0],
    }
    write_result(
        ROOT / "var" / "bench" / "adapters.json",
        {
            "code": code_version(),
            "machine": machine_info(),
            "config": config,
            "rows": rows,
            "failures": failures,
        },
    )
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


# --- Entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dbos_worker:
        return dbos_worker(args.dbos_worker, args.provider)
    # `git status` (the commit measured) must not refresh the index others are committing to.
    os.environ.setdefault("GIT_OPTIONAL_LOCKS", "0")
    opts = options_from(args, Options)
    return run_stoppable(lambda: benchmark(opts), restore_sigint=True)


if __name__ == "__main__":
    sys.exit(main())
