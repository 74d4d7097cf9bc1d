"""Where one check's time goes: the workers' job function run in this process, every SQL
statement, COMMIT and provider lookup timed around the product code."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.recovery_results import Options
from bench.recovery_seed import PROFILE_RUN_ID, seed


def _statement(sql: str) -> str:
    """A statement's shape: whitespace collapsed, literals and lists cut short."""
    text = re.sub(r"\s+", " ", sql).strip()
    text = re.sub(r"SAVEPOINT \"?\w+\"?", "SAVEPOINT s", text)
    return text if len(text) <= 96 else text[:93] + "…"


@dataclass
class Timer:
    calls: int = 0
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds inside, of the calling thread (the process: `process_cpu`)
    process_cpu: bool = False
    threads: set[int] = field(default_factory=set)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        clock = time.process_time if self.process_cpu else time.thread_time
        wall, cpu = time.perf_counter(), clock()
        try:
            yield
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - wall
            self.cpu += clock() - cpu
            self.threads.add(threading.get_ident())


@dataclass
class CheckerProfile:
    effects: int
    total: Timer
    lookup: Timer
    commit: Timer
    sql: dict[str, Timer]  # statement shape → its timer


def profile_checker(opts: Options, agent_id: int, provider_url: str) -> CheckerProfile:
    """Check `opts.profile_effects` fresh expired effects in this process through the same
    job function the workers ran (`check_effects` in batches of the sweep's size, or `drain`),
    timing every SQL statement, every COMMIT and the provider lookup around the product code,
    in wall time and in this process's CPU time."""
    from django.db import connection

    import reconcilers.providers.sandbox_payments.adapter as payments
    from reconcilers.jobs import check_effects, drain
    from reconcilers.schedules import BATCH

    count = opts.profile_effects
    ids = seed(agent_id, PROFILE_RUN_ID, count, provider_url).ids
    sql: dict[str, Timer] = defaultdict(Timer)
    total, lookup, commit = Timer(process_cpu=True), Timer(), Timer()

    def timed_sql(execute: Any, statement: str, params: Any, many: bool, context: Any) -> Any:
        with sql[_statement(statement)].timing():
            return execute(statement, params, many, context)

    original_lookup = payments.SandboxPayments.lookup

    def timed_lookup(self: Any, effect: Any) -> Any:
        with lookup.timing():
            return original_lookup(self, effect)

    original_commit = connection._commit

    def timed_commit() -> Any:
        with commit.timing():
            return original_commit()

    payments.SandboxPayments.lookup = timed_lookup  # type: ignore[method-assign]
    connection._commit = timed_commit  # type: ignore[method-assign]
    done = 0
    try:
        with connection.execute_wrapper(timed_sql), total.timing():
            if opts.jobs == "sweep":
                for start in range(0, count, BATCH):
                    done += check_effects(ids[start : start + BATCH])
            else:
                done = drain(count)
    finally:
        payments.SandboxPayments.lookup = original_lookup  # type: ignore[method-assign]
        del connection._commit  # back to the class's method
    return CheckerProfile(done, total, lookup, commit, dict(sql))


def print_profile(profile: CheckerProfile) -> dict[str, float]:
    n = max(profile.effects, 1)
    sql_wall = sum(t.seconds for t in profile.sql.values())
    sql_cpu = sum(t.cpu for t in profile.sql.values())
    # Lookups made on other threads overlap the rest: shown, but not subtracted.
    concurrent = bool(profile.lookup.threads - profile.total.threads)
    parts = [
        (
            f"provider lookup (the product adapter) in {len(profile.lookup.threads)} threads, "
            "overlapping: summed, not subtracted"
            if concurrent
            else "provider lookup (the product adapter)",
            profile.lookup,
        ),
        ("COMMIT (one per check's transaction)", profile.commit),
    ]
    sequential = [t for _, t in parts if not (concurrent and t is profile.lookup)]
    rest_wall = profile.total.seconds - sql_wall - sum(t.seconds for t in sequential)
    rest_cpu = profile.total.cpu - sql_cpu - sum(t.cpu for t in sequential)
    print(
        f"\nWhere one check's time goes: {profile.effects} effects checked in this process by "
        f"the workers' job function: {1000 * profile.total.seconds / n:.2f} ms wall each "
        f"({n / profile.total.seconds:.0f}/s on one thread), of which "
        f"{1000 * profile.total.cpu / n:.2f} ms CPU in this process:"
    )
    print("    wall ms    cpu ms   calls  per effect")
    for label, timer in parts:
        print(
            f"  {1000 * timer.seconds / n:8.2f}  {1000 * timer.cpu / n:8.2f}  "
            f"{timer.calls / n:6.1f}  {label}"
        )
    calls = sum(t.calls for t in profile.sql.values())
    print(
        f"  {1000 * sql_wall / n:8.2f}  {1000 * sql_cpu / n:8.2f}  {calls / n:6.1f}  "
        "SQL statements (psycopg: round trip + server time; autocommit ones include their commit)"
    )
    print(
        f"  {1000 * rest_wall / n:8.2f}  {1000 * rest_cpu / n:8.2f}  {'':6}  "
        "Python around them (ORM, model instances, transitions, policy, digests)"
        + (", and waiting for the lookups" if concurrent else "")
    )
    print("  SQL by statement:")
    for statement, timer in sorted(profile.sql.items(), key=lambda kv: -kv[1].seconds):
        print(
            f"  {1000 * timer.seconds / n:8.2f}  {1000 * timer.cpu / n:8.2f}  "
            f"{timer.calls / n:6.2f}    {statement}"
        )
    return {
        "effects": profile.effects,
        "wall_ms": 1000 * profile.total.seconds / n,
        "cpu_ms": 1000 * profile.total.cpu / n,
        "lookup_wall_ms": 1000 * profile.lookup.seconds / n,
        "lookup_cpu_ms": 1000 * profile.lookup.cpu / n,
        "commit_wall_ms": 1000 * profile.commit.seconds / n,
        "sql_wall_ms": 1000 * sql_wall / n,
        "python_wall_ms": 1000 * rest_wall / n,
        "sql": {k: 1000 * t.seconds / n for k, t in profile.sql.items()},
    }
