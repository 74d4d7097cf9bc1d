"""Payments per second of one agent's payment loop: the ledger against no record, DBOS and raw
psycopg, with a provider that answers at once.

One sequential worker, no crashes. A payment through the ledger is (1) `POST /api/v1/effects`
with `claim: true` (intent and claim in one call), (2) the provider call carrying the ledger's
`idempotency_key`, (3) `POST /api/v1/effects/{id}/outcome` with the lease token and
`status: confirmed`, over one keep-alive httpx connection. The contenders make the same
provider call with the same request and differ in what they record around it:

* plain loop: the call with a key, no record at all;
* DBOS: one DBOS workflow per payment, the call its step (`bench.payments_dbos`);
* ledger: the service under gunicorn as `make run` starts it (`bench.payments_ledger`);
* raw psycopg floor: the same two commits per payment (intent+claim inserted, outcome
  updated) straight on psycopg, no HTTP (`bench.payments_loops.FloorLoop`).

The provider is `bench.payments_provider`, a keep-alive HTTP server in a process of its own.
Rounds interleave (ledger, plain, DBOS, floor, then the reverse, …), N payments per contender
and round after a short untimed warm-up; the figures are the medians of the rounds. Beside
them: latency per payment and per call as the worker saw it, the ledger's server time per call
(gunicorn's access log, `%(D)s`), CPU per payment by party (/proc), and `synchronous_commit`
as read on each contender's connections (the run fails if it is off anywhere).

Targets, with pass/miss: ledger ≥ 0.4 × the plain loop; ledger ≥ 1.2 × DBOS (aiming for 2 ×).
Exit status 0 also when a target is missed (this is a measurement); 1 when a contender erred,
DBOS is missing or would not run, or a database commits asynchronously. Everything runs in
fresh databases derived from DATABASE_URL (`<name>_payments`, `<name>_payments_dbos`), dropped
at the end unless --keep-db; every process started here is stopped on exit, Ctrl-C or SIGTERM.
The table is printed and written to `var/bench/payments.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu import CpuWindow, Parties
from bench.harness import (
    bench_database,
    drop_quietly,
    fresh_bench_database,
    options_from,
    run_stoppable,
)
from bench.lifecycle_load import OWN_DATABASES, _is_ours
from bench.payments_dbos import DbosFailed, DbosLoop, dbos_worker
from bench.payments_ledger import LedgerServer, database_setting, ledger_server
from bench.payments_loops import FloorLoop, LedgerLoop, PlainLoop, Round
from bench.payments_provider import provider_process
from bench.payments_report import (
    Summary,
    Target,
    busy_warning,
    print_round,
    print_tables,
    print_targets,
    summarise,
    verdicts,
    write_json,
)

LEDGER_DB = "payments"  # <DATABASE_URL's database>_payments
PLAIN, FLOOR = PlainLoop.name, FloorLoop.name


@dataclass(frozen=True)
class Options:
    payments: int
    rounds: int
    warmup: int
    keep_db: bool


class Contender(Protocol):
    name: str

    def measure(self, warmup: int, payments: int, tag: str) -> Round: ...


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--payments", type=int, default=1000, help="timed payments per contender and round (1000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds; the figures are medians (5)"
    )
    parser.add_argument(
        "--warmup", type=int, default=50, help="untimed payments before each round's (50)"
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark databases")
    # Internal: the DBOS contender runs in a child process of its own.
    parser.add_argument("--dbos-worker", metavar="SYSTEM_DB_URL", help=argparse.SUPPRESS)
    parser.add_argument("--provider", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.payments < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--payments and --rounds must be ≥ 1, --warmup ≥ 0")
    return args


# --- The benchmark ---------------------------------------------------------------------------


def benchmark(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL is not set (run it through `make bench`).")
    print(
        f"Payment-loop benchmark: one sequential worker, {opts.payments} payments per "
        f"contender and round (+{opts.warmup} untimed), {opts.rounds} interleaved rounds; "
        f"{os.cpu_count()} cores shared by all parties.",
        flush=True,
    )
    if opts.rounds < 5:
        print(f"Note: {opts.rounds} rounds; the issue asks for at least 5.", flush=True)
    failures: list[str] = []
    rounds: dict[str, list[Round]] = {}
    settings: dict[str, list[str]] = {PLAIN: ["n/a (writes nothing)"]}
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="paybench-")))
        provider = stack.enter_context(provider_process())
        name = bench_database(base_url, LEDGER_DB)
        OWN_DATABASES.add(name)
        if not opts.keep_db:
            stack.callback(drop_quietly, base_url, name)
        try:
            dbos = DbosLoop(base_url, provider.url, opts.keep_db)  # launches while we migrate
        except DbosFailed as exc:
            print(f"DBOS: {exc}", file=sys.stderr)
            return 1
        stack.callback(dbos.close)
        env, (key,) = fresh_bench_database(base_url, name, ["payments-bench"])
        server = stack.enter_context(ledger_server(env, scratch))
        print(f"Ledger: {server.label}; provider: {provider.url}.", flush=True)
        settings[LedgerLoop.name] = [database_setting(env["DATABASE_URL"])]
        floor = FloorLoop(env["DATABASE_URL"], provider.url)
        stack.callback(floor.close)
        try:
            dbos.wait_ready()
        except DbosFailed as exc:
            print(f"DBOS: {exc}", file=sys.stderr)
            return 1
        contenders: list[Contender] = [
            LedgerLoop(server.base_url, key, provider.url),
            PlainLoop(provider.url),
            dbos,
            floor,
        ]
        ours = {os.getpid(), dbos.pid}
        server_pgid, provider_pgid = server.server.proc.pid, provider.proc.pid
        run = uuid.uuid4().hex[:8]
        for number in range(1, opts.rounds + 1):
            print(f"round {number}/{opts.rounds}", flush=True)
            order = contenders if number % 2 else contenders[::-1]
            for contender in list(order):
                tag = f"pay-{run}-r{number}"
                loop_pid = dbos.pid if contender is dbos else os.getpid()
                parties = cpu_parties(loop_pid, ours, server_pgid, provider_pgid)
                try:
                    result = measure(contender, opts, tag, server, parties)
                except DbosFailed as exc:  # the worker died: no more DBOS rounds
                    failures.append(f"{contender.name}: {exc}")
                    contenders.remove(contender)
                    continue
                rounds.setdefault(contender.name, []).append(result)
                if result.synchronous_commit:
                    settings[contender.name] = sorted(
                        {*settings.get(contender.name, []), *result.synchronous_commit}
                    )
                print_round(number, result)
    summaries = {
        c: summarise(c, rounds.get(c, []), settings.get(c, []))
        for c in (LedgerLoop.name, PLAIN, dbos.name, FLOOR)
    }
    return report(summaries, dbos.name, opts, failures)


def measure(
    contender: Contender, opts: Options, tag: str, server: LedgerServer, parties: Parties
) -> Round:
    """One round of one contender, with the CPU each party spent meanwhile; for the ledger also
    the server time of each timed call, from gunicorn's access log."""
    offset = server.log.offset()
    window = CpuWindow(parties)
    window.start()
    result = contender.measure(opts.warmup, opts.payments, tag)
    window.stop()
    result.cpu_seconds = window.seconds
    if contender.name == LedgerLoop.name:
        result.server = server.log.server_times(
            offset, skip=2 * opts.warmup, count=2 * opts.payments
        )
    return result


def cpu_parties(loop_pid: int, ours: set[int], server_pgid: int, provider_pgid: int) -> Parties:
    """Who spent the CPU of a round: the process running the loop (for DBOS, its worker),
    gunicorn, the provider, PostgreSQL (this run's backends and the server's own processes),
    our idle processes; everything else is "other"."""
    return {
        "loop": lambda p: p.pid == loop_pid,
        "server": lambda p: p.pgrp == server_pgid,
        "provider": lambda p: p.pgrp == provider_pgid,
        "postgres": lambda p: p.title.startswith("postgres") and _is_ours(p.title),
        "bench, idle": lambda p: p.pid in ours,
    }


def report(
    summaries: dict[str, Summary], dbos_name: str, opts: Options, failures: list[str]
) -> int:
    targets = [
        Target("ledger ÷ plain loop", PLAIN, 0.4),
        Target("ledger ÷ DBOS", dbos_name, 1.2, aim=2.0),
    ]
    print()
    print_tables(summaries, targets)
    rows = verdicts(summaries, targets)
    print_targets(rows)
    for s in summaries.values():
        if s.errors or not s.payments:
            failures.append(f"{s.name}: {s.errors} errors, {s.payments} timed payments")
            for sample in s.error_samples:
                print(f"  {s.name} error: {sample}", file=sys.stderr)
        if "off" in s.synchronous_commit:
            failures.append(f"{s.name}: synchronous_commit is off")
    print(
        "\nEvery contender makes the same provider call (POST /charges with an "
        "Idempotency-Key, one keep-alive httpx connection) with the same request; rates are "
        "medians of the rounds, latencies over all timed payments. synchronous_commit: "
        "the floor's connection; every connection DBOS's engines opened; a new connection to "
        "the ledger's database as its role (the API cannot show the ledger's own sessions)."
    )
    warning = busy_warning(summaries)
    if warning:
        print(warning)
    config = {
        "payments_per_round": opts.payments,
        "rounds": opts.rounds,
        "warmup_payments": opts.warmup,
        "order": "ledger, plain loop, DBOS, floor; reversed every other round",
        "provider": "bench/payments_provider.py: stdlib ThreadingHTTPServer, HTTP/1.1 "
        "keep-alive, no storage",
        "client": "httpx.Client, one keep-alive connection per service per round",
    }
    write_json(summaries, rows, config, failures)
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
