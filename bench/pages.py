"""Server time of the operator pages at scale, against the raw SQL each page needs.

The issue's goal: with 1,000,000 effects and 100,000 open review items, every operator page
(the review queue with each filter, its page 50 and htmx partial, the effect detail page and the
overview) answers within 150 ms at the 95th percentile (server time), while pages poll in the
background.

1. **The dataset** is built set-based (`INSERT … SELECT generate_series`, no per-row ORM) in a
   fresh database derived from DATABASE_URL (`<name>_bench_pages`), migrated, with the tools of
   `tools.toml`: effects of four agents in runs of 20 steps over 60 days, in creation order,
   mostly confirmed, some failed or cancelled, the last day's partly in flight. 100,000 of the
   last ~15 days' effects have an open review item (ten reasons, each with the statuses and
   tools it comes with; opened over 14 days, due 7 days later, a fifth of them assigned), some
   with dependencies (satisfied ones, and planned effects they hold back), a decision from an
   earlier review, or a compensation as the reviewed effect itself. Older effects carry resolved
   review items with their decisions (and the compensation of each "compensate"). Every
   reviewed effect and every fourth other one has its events (intent, claim, outcome,
   reconciliation); decisions have theirs. Decision and compensation effects count towards
   `--effects`. Then `VACUUM ANALYZE`.
2. **Server time**: Django's test `Client`, signed in as an operator — the whole request path
   (middleware, session, auth, view, ORM, template) in-process, no network — for the queue
   (default, page 50, filters by tool, reason, age, assignee, sort by due time, the htmx
   partial), the detail page of effects in review (a random sample, each opened once) and the
   overview. Page kinds take turns in rounds, after a warm-up; p50 / p95 / max per kind, and the
   share of it spent waiting for SQL. An untimed pass counts the queries of each page
   (`CaptureQueriesContext`) and names its slowest one. Meanwhile `--pollers` operators (2) keep
   the overview open: each polls its panels every `--poll-every` seconds (5, as the page does)
   from a thread of its own, and their polls are reported apart. The overview's counts come from
   a summary that a thread re-reads every LEDGER_METRICS_REFRESH seconds while pages poll; that
   read is timed once and reported too (its cost is in the machine's load, not in a page's).
3. **Baseline**, in the same rounds (every fourth): the page's main query on raw psycopg
   (client-side binding, as Django), in the page's shape: for the queue, the page's 50 ids picked
   from the open review items alone in the page's order and filter, then their rows joined to
   effect, agent and people, with the count of matching items up to the cap; an effect's events;
   the overview's per-request reads (oldest unresolved effect, recent activity). The ratio page ÷
   raw is of the medians. Besides wall time, the CPU of each request in this process and in its
   PostgreSQL backend (from /proc), which another job on the machine barely changes.
4. A page whose p95 misses the goal gets `EXPLAIN (ANALYZE, BUFFERS)` of its slowest query
   (`--explain`: every page).

The database is dropped at the end unless --keep-db; --reuse-db measures one kept earlier
(after `migrate`, so new indexes apply). Results go to `var/bench/pages.json`. Exit status 0
also when the goal is missed (this is a measurement); 1 when a page did not answer 200.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    bench_database,
    code_version,
    drop_quietly,
    fresh_bench_database,
    kept_database_env,
    options_from,
    script_main,
    setup_django,
)
from bench.pages_dataset import Layout, build, describe, people
from bench.pages_measure import (
    RAW_EVERY,
    Pollers,
    capture,
    detail_sample,
    explain,
    measure,
    page_kinds,
    raw_connection,
)
from bench.pages_results import (
    GOAL_MS,
    print_queries,
    print_results,
    shape,
    summarise,
    write_report,
)
from bench.report import percentile
from devstack.provision import manage


@dataclass(frozen=True)
class Options:
    effects: int
    reviews: int
    requests: int
    warmup: int
    seed: int
    explain: bool
    keep_db: bool
    reuse_db: bool
    pollers: int
    poll_every: float


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--effects", type=int, default=1_000_000, help="effects (1000000)")
    parser.add_argument("--reviews", type=int, default=100_000, help="open review items (100000)")
    parser.add_argument(
        "--requests", type=int, default=200, help="measured requests per page kind (200)"
    )
    parser.add_argument("--warmup", type=int, default=10, help="warm-up requests per kind (10)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the detail-page sample")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="EXPLAIN (ANALYZE, BUFFERS) the slowest query of every page, not only slow ones",
    )
    parser.add_argument(
        "--pollers", type=int, default=2, help="operators polling the overview meanwhile (2)"
    )
    parser.add_argument(
        "--poll-every", type=float, default=5.0, help="seconds between their polls (5)"
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark database")
    parser.add_argument(
        "--reuse-db",
        action="store_true",
        help="measure the database a --keep-db run left (migrated first; no build)",
    )
    args = parser.parse_args(argv)
    if args.reviews < 20 or args.requests < 1 or args.warmup < 0 or args.pollers < 0:
        parser.error("--reviews must be ≥ 20, --requests ≥ 1, --warmup ≥ 0, --pollers ≥ 0")
    if args.poll_every <= 0:
        parser.error("--poll-every must be > 0")
    if not args.reuse_db:
        layout = Layout.of(args.effects, args.reviews)
        if layout.base < 10 * max(layout.old, 1):
            parser.error(
                f"--effects {args.effects} is too few for --reviews {args.reviews}: "
                f"at least {5 * args.reviews} (reviewed effects are half of the newest ones)"
            )
    return options_from(args, Options)


# --- Entry point -----------------------------------------------------------------------------


def open_database(opts: Options, base_url: str, name: str) -> dict[str, str]:
    """The environment for a fresh database (migrated, tools loaded), or for the kept one."""
    if not opts.reuse_db:
        env, _ = fresh_bench_database(base_url, name, [])
        return env
    env = kept_database_env(base_url, name)
    manage(env, "migrate", "--verbosity", "0")
    return env


@contextlib.contextmanager
def signed_in_client() -> Iterator[tuple[Any, Any]]:
    from django.test import Client

    me, _ = people()
    client = Client()
    client.force_login(me)
    try:
        yield client, me
    finally:
        client.logout()


def time_summary() -> float:
    """Milliseconds one read of the summary takes (what the refreshing thread runs)."""
    from ledger.overview.summary import read_summary

    start = time.perf_counter()
    read_summary()
    return 1000 * (time.perf_counter() - start)


def report_polls(pollers: Pollers) -> dict[str, Any]:
    polls = sorted(pollers.ms)
    if not polls:
        return {"polls": 0}
    shown = {
        "polls": len(polls),
        "poll_p50_ms": polls[len(polls) // 2],
        "poll_p95_ms": percentile(polls, 0.95),
        "poll_errors": pollers.errors,
    }
    print(
        f"\nBackground: {pollers.count} operators polled the overview's panels {len(polls)} "
        f"times, p50 {shown['poll_p50_ms']:.1f} ms, p95 {shown['poll_p95_ms']:.1f} ms, "
        f"{pollers.errors} not 200."
    )
    return shown


def benchmark(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url or not os.environ.get("REDIS_URL"):
        raise SystemExit("DATABASE_URL and REDIS_URL must be set (run it through `make bench`).")
    name = bench_database(base_url, "bench_pages")
    print(
        f"Operator pages benchmark on {os.cpu_count()} CPUs; database {name}; "
        f"code {code_version()}.",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        if not opts.keep_db and not opts.reuse_db:
            stack.callback(drop_quietly, base_url, name)
        start = time.perf_counter()
        env = open_database(opts, base_url, name)
        setup_django(env)
        from django.db import connections

        stack.callback(connections.close_all)
        build_seconds: dict[str, float] = {"migrate": time.perf_counter() - start}
        if opts.reuse_db:
            print("  reusing the kept database (migrated; not rebuilt)", flush=True)
        else:
            layout = Layout.of(opts.effects, opts.reviews)
            print(
                f"  migrated with tools loaded in {build_seconds['migrate']:.1f} s; building "
                f"{opts.effects} effects ({layout.actions} actions, {layout.decisions} "
                f"decisions, {layout.compensations} compensations), {opts.reviews} open "
                "review items",
                flush=True,
            )
            build_seconds |= build(layout)
            built = sum(v for k, v in build_seconds.items() if k != "migrate")
            build_seconds["total"] = built
            print(f"  dataset built in {built:.1f} s (VACUUM ANALYZE included)", flush=True)
        dataset = describe()
        print(f"  holds: {dataset['counts']}")
        print(f"  effects by status: {dataset['statuses']}")
        print(f"  open items by reason: {dataset['reasons']}")
        print(f"  sizes: {dataset['sizes']}", flush=True)

        client, me = stack.enter_context(signed_in_client())
        kinds = page_kinds(me.id, detail_sample(opts.warmup + opts.requests, opts.seed))
        raw = stack.enter_context(raw_connection(env["DATABASE_URL"]))
        print(
            f"\nMeasuring {len(kinds)} page kinds: {opts.warmup} warm-up + {opts.requests} "
            f"measured requests each, in rounds (each page, then its raw query every {RAW_EVERY} "
            "rounds).",
            flush=True,
        )
        background = {"summary_read_ms": time_summary()}
        print(
            f"  the summary behind the overview reads in {background['summary_read_ms']:.0f} ms; "
            f"{opts.pollers} operators poll the overview every {opts.poll_every:g} s meanwhile",
            flush=True,
        )
        with Pollers(opts.pollers, opts.poll_every, me) as pollers:
            samples, machine = measure(kinds, client, raw, opts.warmup, opts.requests)
        background |= report_polls(pollers)
        captured = capture(kinds, client)
        results = [summarise(k, samples[k.name], captured[k.name]) for k in kinds]

        print_results(results, machine)
        print_queries(kinds, captured)

        plans: dict[str, list[str]] = {}
        for result, kind in zip(results, kinds, strict=True):
            slowest = captured[kind.name].slowest
            if slowest and (opts.explain or result.met is False):
                sql = slowest[0][1]
                plans[kind.name] = explain(sql)
                why = "p95 misses the goal" if result.met is False else "--explain"
                print(f"\nEXPLAIN (ANALYZE, BUFFERS) of {kind.name}'s slowest query ({why}):")
                print(f"  {shape(sql, 400)}")
                for line in plans[kind.name]:
                    print(f"    {line}")

        missed = [r.page for r in results if r.met is False]
        print(
            f"\nGoal p95 < {GOAL_MS:g} ms for every page: "
            + ("met by every page." if not missed else f"missed by {', '.join(missed)}.")
        )
        write_report(
            asdict(opts), results, machine, dataset, build_seconds, captured, plans, background
        )
        errors = [e for r in results for e in r.errors]
        if errors:
            print(f"pages that did not answer 200: {errors}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(script_main(parse_args, benchmark))
