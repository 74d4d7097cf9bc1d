"""Effect lifecycles per second under gunicorn, against baselines measured in the same run.

One lifecycle is what an agent does around one side effect: `POST /api/v1/effects` with
`claim: true` (intent and claim in one call) and `POST /api/v1/effects/{id}/outcome` with the
lease token (`confirmed`). Eight concurrent clients run lifecycles back to back; the script
reports lifecycles/s and p50/p99 latency, and measures at the same concurrency:

A. a bare WSGI + psycopg app (`bench/baseline_wsgi.py`) under the same gunicorn configuration,
   running the same statements in the same transactions over HTTP — goal: ledger ÷ A ≥ 0.5;
B. the same statements on raw psycopg, no HTTP — reported: it shows what HTTP costs;
C. DBOS step checkpoints, 8 concurrent workflows of 2 steps — goal: lifecycles/s ÷ steps/s ≥ 1
   (skipped, with the reason, when `dbos` does not import or launch).

The contenders take turns in interleaved rounds (ledger, A, B, C, then C, B, A, ledger, …), so
a change in what else the machine is doing hurts them alike; per round each gets a warm-up and
a measured window. Besides rates, the script reads /proc to report the CPU milliseconds each
lifecycle cost the server, PostgreSQL and the load generator — steadier than rates when other
work shares the machine, and the proof that the load generator is not the bottleneck.

Everything runs in fresh databases derived from DATABASE_URL (`<name>_bench`, `<name>_dbos`),
dropped at the end unless --keep-db. The table is printed and written to
`var/bench/lifecycle.json`. Exit status: 0, also when a goal is missed (this is a measurement);
1 when the ledger run had errors. Everything started here is stopped on exit, Ctrl-C or SIGTERM.

`--profile` instead runs the ledger's hot path in-process (the WSGI application called
directly, one thread) and prints where the time goes: by phase (timed by wrappers, with the
PostgreSQL waits of each phase) and by layer and function (cProfile).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from pathlib import Path

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import bench_database, drop_quietly, options_from, run_stoppable
from bench.lifecycle_clients import DirectSession, HttpSession
from bench.lifecycle_dbos import DBOS_GOAL, DbosContender, DbosUnavailable, dbos_worker, skipped
from bench.lifecycle_load import (
    BENCH_DB,
    Contender,
    LoadContender,
    Measurement,
    Options,
    Result,
    gunicorn,
    prepare_database,
    summarise,
)
from bench.lifecycle_profile import profile
from bench.lifecycle_report import (
    busy_warning,
    machine_note,
    print_cpu_table,
    print_round,
    print_table,
    print_writes,
    write_json,
    writes_check,
)

LEDGER_GOAL = 0.5  # ledger ÷ bare WSGI


def parse_args(argv: list[str]) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (8)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds: every contender runs once per round (3)",
    )
    parser.add_argument(
        "--duration", type=float, default=5.0, help="measured seconds per contender and round (5)"
    )
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="warm-up seconds before each measurement (2)"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (2)")
    parser.add_argument("--threads", type=int, default=4, help="gunicorn threads/worker (4)")
    parser.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="processes the clients are spread over (1; threads within each)",
    )
    parser.add_argument(
        "--reconnect-every",
        type=int,
        default=20,
        help="HTTP clients open a new keep-alive connection every N lifecycles (20; 0 = never)",
    )
    parser.add_argument("--skip-dbos", action="store_true", help="do not run the DBOS baseline")
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark databases")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the ledger's hot path in-process instead of benchmarking",
    )
    parser.add_argument(
        "--profile-lifecycles", type=int, default=300, help="lifecycles per profile pass (300)"
    )
    # Internal: the DBOS baseline runs in a child process of its own.
    parser.add_argument("--dbos-worker", metavar="SYSTEM_DB_URL", help=argparse.SUPPRESS)
    parser.add_argument("--dbos-executor", default="bench-0", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.clients < 1 or args.rounds < 1 or args.duration <= 0 or args.warmup < 0:
        parser.error("--clients and --rounds must be ≥ 1, --duration > 0, --warmup ≥ 0")
    args.client_processes = max(1, min(args.client_processes, args.clients))
    args.reconnect_every = max(0, args.reconnect_every)
    return options_from(args, Options), args


# --- The benchmark ---------------------------------------------------------------------------


def benchmark(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL is not set (run it through `make bench`).")
    label = f"gunicorn gthread, {opts.workers} workers × {opts.threads} threads"
    print(
        f"Effect lifecycle benchmark: {opts.clients} concurrent clients; {opts.rounds} "
        f"interleaved rounds of {opts.warmup:g} s warm-up + {opts.duration:g} s measured "
        f"per contender; {label}.",
        flush=True,
    )
    print(f"Machine: {machine_note()}.", flush=True)
    dbos_skip: str | None = "--skip-dbos" if opts.skip_dbos else None
    # Without HTTP, baseline B and DBOS run their clients in one process per core (like
    # gunicorn's workers): in one process they would be held to one core by the GIL.
    parallel = min(opts.clients, os.cpu_count() or 1)
    measurements: dict[str, list[Measurement]] = {}
    with contextlib.ExitStack() as stack:
        if not opts.keep_db:
            stack.callback(drop_quietly, base_url, bench_database(base_url, BENCH_DB))
        db = prepare_database(base_url)
        dbos: DbosContender | None = None
        if dbos_skip is None:
            try:
                dbos = DbosContender(base_url, opts, parallel)  # launches while gunicorn starts
                stack.callback(dbos.close)
            except DbosUnavailable as exc:
                dbos_skip = str(exc)
        ledger_server = stack.enter_context(gunicorn("config.wsgi:application", db.env, opts))
        bare_server = stack.enter_context(gunicorn("bench.baseline_wsgi:application", db.env, opts))
        contenders: list[Contender] = [
            LoadContender(
                f"ledger ({opts.workers}w×{opts.threads}t)",
                lambda c: HttpSession(
                    ledger_server.base_url, db.ledger_key, c, opts.reconnect_every
                ),
                opts,
                ledger_server,
            ),
            LoadContender(
                "A: bare WSGI + psycopg, same SQL",
                lambda c: HttpSession(
                    bare_server.base_url, db.baseline_key, c, opts.reconnect_every
                ),
                opts,
                bare_server,
            ),
            LoadContender(
                "B: raw psycopg, same SQL, no HTTP",
                lambda c: DirectSession(db.url, db.baseline_key, c),
                dataclasses.replace(opts, client_processes=parallel),
                None,
            ),
        ]
        if dbos is not None:
            try:
                dbos.wait_ready()
                contenders.append(dbos)
            except DbosUnavailable as exc:
                dbos_skip = str(exc)
        for round_no in range(opts.rounds):
            print(f"round {round_no + 1}/{opts.rounds}", flush=True)
            order = list(contenders) if round_no % 2 == 0 else contenders[::-1]
            for contender in order:
                try:
                    m = contender.measure()
                except DbosUnavailable as exc:
                    dbos_skip = str(exc)
                    contenders.remove(contender)
                    measurements.pop(contender.name, None)
                    continue
                measurements.setdefault(contender.name, []).append(m)
                is_dbos = contender is dbos
                print_round(
                    contender.name,
                    "steps" if is_dbos else "lifecycles",
                    m,
                    per_lifecycle=2 if is_dbos else 1,
                )
        writes = writes_check(db.url)
    results = collect(parallel, contenders, measurements, dbos, dbos_skip, opts)
    print()
    print_table(results)
    print_cpu_table(results)
    print_writes(writes)
    print()
    print(
        f"ratio = ledger lifecycles/s ÷ the baseline's rate (DBOS: ÷ steps/s). "
        f"Server: {label} (ledger and A alike). Clients: {opts.clients} threads in "
        f"{opts.client_processes} process(es), stdlib http.client with keep-alive."
    )
    print(f"Machine: {machine_note()}.")
    warning = busy_warning(results)
    if warning:
        print(warning)
    write_json(results, opts, label, writes)
    ledger = results[0]
    if ledger.errors or not ledger.completed:
        print(f"The ledger run had {ledger.errors} errors.", file=sys.stderr)
        return 1
    return 0


def collect(
    parallel: int,
    contenders: list[Contender],
    measurements: dict[str, list[Measurement]],
    dbos: DbosContender | None,
    dbos_skip: str | None,
    opts: Options,
) -> list[Result]:
    ledger_name, bare_name, direct_name = (c.name for c in contenders[:3])
    ledger = summarise(
        ledger_name,
        "lifecycles",
        measurements[ledger_name],
        note="POST /effects (claim) + POST /outcome over HTTP",
    )
    bare = summarise(
        bare_name,
        "lifecycles",
        measurements[bare_name],
        note="same statements and transactions; no framework, validation, redaction",
    )
    bare.ratio, bare.goal = _ratio(ledger.rate, bare.rate), LEDGER_GOAL
    direct = summarise(
        direct_name,
        "lifecycles",
        measurements[direct_name],
        note=f"{opts.clients} threads in {parallel} processes, one psycopg connection each",
    )
    direct.ratio = _ratio(ledger.rate, direct.rate)
    results = [ledger, bare, direct]
    if dbos is not None and dbos_skip is None:
        steps = summarise(
            dbos.name,
            "steps",
            measurements[dbos.name],
            per_lifecycle=2,
            note=f"{opts.clients} threads in {parallel} processes (DBOS executors); "
            "p50/p99 per 2-step workflow",
        )
        steps.ratio, steps.goal = _ratio(ledger.rate, steps.rate), DBOS_GOAL
        results.append(steps)
    else:
        results.append(skipped(dbos_skip or "not run"))
    return results


def _ratio(ledger: float | None, baseline: float | None) -> float | None:
    if not ledger or not baseline:
        return None
    return ledger / baseline


# --- Entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    opts, args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dbos_worker:
        return dbos_worker(args.dbos_worker, args.dbos_executor, opts.clients)
    return run_stoppable(lambda: profile(opts) if opts.profile else benchmark(opts))


if __name__ == "__main__":
    sys.exit(main())
