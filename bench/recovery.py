"""Recovery after a crash, and the escalation sweep, measured against goals and raw SQL.

1. **Recovery.** 10,000 `charge_card` effects are left in `dispatching` with leases that
   expired ten minutes ago, as a crashed fleet of agents would leave them; half of them were
   charged at the sandbox payments provider (under the effect's idempotency key), half never
   arrived. The product's own machinery then resolves them: the django-q2 sweep
   (`reconcilers.schedules.sweep`, called here once) enqueues `check_effects` jobs of 200 ids,
   and two `manage.py rqworker default --worker-class reconcilers.worker.LedgerWorker`
   processes — what `make run` starts — run them. Measured: wall time from the sweep until no
   effect is left in dispatching / awaiting_confirmation / unknown, as effects/s (goal ≥ 500).
   Checked:
   5,000 confirmed with the provider's charge id, 5,000 planned (not found, settle_after
   passed, attempts left), none failed or unknown, one `reconciliation` event each, no review
   item, and not one new charge at the provider. `--jobs drain` feeds the workers batched
   `drain-checks` jobs (`reconcilers.jobs.drain`) instead.

   The run stops at `--timeout` (100 s) and then reports the rate of what it resolved and
   checks those. Beside it, in the same run: the provider's own lookup latency (the product
   adapter's call, and a plain keep-alive GET), the CPU each party spent per effect (from
   /proc: the noise-resistant twin of the rate; 2 cores ÷ 300/s = a 6.7 ms budget), and a
   single-threaded in-process profile of the same job function (`--profile-effects`, 0 to
   skip) that times every SQL statement, COMMIT and provider call, so a slow run says where
   its time went.

2. **Escalation.** The database is filled up to 1,000,000 effects (`INSERT … SELECT
   generate_series`), of which 10,000 are stale (non-terminal, created more than 24 h ago);
   the rest are confirmed (60 days of history) or recent. After `VACUUM ANALYZE`,
   `reviews.alerts.escalation.escalate()` runs in-process (best of 3, review items deleted
   between runs; it must open exactly 10,000) against, in the same rounds, a raw `SELECT id … WHERE
   status IN (…) AND created_at < now() - interval '24 hours'` and a raw `INSERT … SELECT` of
   the same rows; then a repeat sweep that must open nothing. Goal < 1 s. `--explain` prints
   `EXPLAIN (ANALYZE, BUFFERS)` of the escalation's selection, of the raw query, and of the
   whole escalation statement (rolled back, constraints immediate so that the foreign-key
   checks show).

Everything runs in a fresh database derived from DATABASE_URL (`<name>_bench_recovery`),
dropped at the end unless --keep-db, and on a Redis database index that was empty (so no other
worker on the machine takes these jobs, nor these workers anyone else's). The table is printed
and written to `var/bench/recovery.json`. Exit status: 0 also when a goal is missed (this is a
measurement); 1 when a correctness check failed. Every process started here is stopped on
exit, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    bench_database,
    code_version,
    drop_quietly,
    fresh_bench_database,
    options_from,
    script_main,
    setup_django,
)
from bench.recovery_escalation import run_escalation
from bench.recovery_results import Options, Report, print_table, write_report
from bench.recovery_run import claim_redis_db, release_redis_db, run_recovery
from devstack.sandbox.launch import running


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--effects", type=int, default=10_000, help="effects left dispatching (10000)"
    )
    parser.add_argument("--workers", type=int, default=2, help="rq worker processes (2)")
    parser.add_argument(
        "--jobs",
        choices=("sweep", "drain"),
        default="sweep",
        help="sweep: the product's sweep enqueues check_effects jobs (production); "
        "drain: batched drain-checks jobs (reconcilers.jobs.drain)",
    )
    parser.add_argument(
        "--drain-limit", type=int, default=500, help="effects per drain job with --jobs drain"
    )
    parser.add_argument(
        "--timeout", type=float, default=100.0, help="give up on recovery after this many s (100)"
    )
    parser.add_argument(
        "--profile-effects",
        type=int,
        default=200,
        help="effects checked in the in-process profile of the checker (200; 0 skips it)",
    )
    parser.add_argument(
        "--total", type=int, default=1_000_000, help="effects in the escalation table (1000000)"
    )
    parser.add_argument("--stale", type=int, default=10_000, help="stale effects among them")
    parser.add_argument("--repeats", type=int, default=3, help="escalation runs, best of (3)")
    parser.add_argument(
        "--explain", action="store_true", help="print EXPLAIN (ANALYZE, BUFFERS) of both queries"
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark database")
    parser.add_argument("--skip-recovery", action="store_true", help="escalation only")
    parser.add_argument("--skip-escalation", action="store_true", help="recovery only")
    args = parser.parse_args(argv)
    if args.effects < 2 or args.workers < 1 or args.repeats < 1 or args.drain_limit < 1:
        parser.error("--effects must be ≥ 2; --workers, --repeats and --drain-limit ≥ 1")
    if not 0 < args.stale < args.total:
        parser.error("--stale must be between 0 and --total")
    args.profile_effects = max(0, args.profile_effects)
    return options_from(args, Options)


# --- Entry point -----------------------------------------------------------------------------


def benchmark(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    redis_base = os.environ.get("REDIS_URL", "")
    if not base_url or not redis_base:
        raise SystemExit("DATABASE_URL and REDIS_URL must be set (run it through `make bench`).")
    name = bench_database(base_url, "bench_recovery")
    report = Report()
    print(
        f"Recovery and escalation benchmark on {os.cpu_count()} CPUs; database {name}; "
        f"code {code_version()}.",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-rec-")))
        redis_url, redis = claim_redis_db(redis_base)
        stack.callback(release_redis_db, redis)
        if not opts.keep_db:
            stack.callback(drop_quietly, base_url, name)
        start = time.perf_counter()
        env, _ = fresh_bench_database(base_url, name, ["bench"], REDIS_URL=redis_url)
        setup_django(env)
        from django.db import connections

        stack.callback(connections.close_all)
        from ledger.models import Agent, Tool

        agent_id = Agent.objects.get(name="bench").id
        print(
            f"  database migrated, tools loaded, agent created in "
            f"{time.perf_counter() - start:.1f} s; Redis queue on {urlsplit(redis_url).path}",
            flush=True,
        )
        if not opts.skip_recovery:
            provider = stack.enter_context(running("payments", directory))
            provider_url = provider.url
            Tool.objects.filter(reconciler="sandbox_payments").update(
                reconciler_config={"base_url": provider_url}
            )
            print(f"  sandbox payments provider at {provider_url}", flush=True)
            run_recovery(
                opts, report, env, agent_id, redis, provider_url, provider, directory, name
            )
        if not opts.skip_escalation:
            run_escalation(opts, report, agent_id)
    print_table(report)
    write_report(report, opts)
    if not report.correct:
        print(
            "correctness checks failed: " + ", ".join(k for k, v in report.checks.items() if not v)
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(script_main(parse_args, benchmark))
