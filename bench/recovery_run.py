"""Recovery, the timed part: the product's sweep enqueues check jobs, rq workers resolve the
crashed fleet's effects, and the result is checked against what the provider holds."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.cpu import CpuWindow
from bench.harness import ROOT, sql_rows, stop_group
from bench.recovery_profile import Timer, print_profile, profile_checker
from bench.recovery_results import Options, Report, Row
from bench.recovery_seed import RUN_ID, TOOL, Seeded, provider_transactions, seed
from devstack.provision import manage_argv
from devstack.sandbox.launch import SandboxProcess

RECOVERY_GOAL = 500.0  # effects resolved per second, two workers
UNRESOLVED = ("dispatching", "awaiting_confirmation", "unknown")


# --- Redis: a database index of our own ------------------------------------------------------


CLAIM_KEY = "bench-recovery:claimed-by"


def claim_redis_db(base_url: str) -> tuple[str, Any]:
    """A Redis URL on a database index that was empty, claimed with a key, so that neither
    another worker on this machine takes our jobs nor our workers take anyone else's."""
    from redis import Redis

    parts = urlsplit(base_url)
    for index in range(15, 0, -1):
        url = urlunsplit(parts._replace(path=f"/{index}"))
        client = Redis.from_url(url, socket_timeout=5)
        if client.dbsize() == 0 and client.set(CLAIM_KEY, str(os.getpid()), nx=True, ex=3600):
            return url, client
        client.close()
    raise SystemExit("no empty Redis database index (1–15) to run the workers' queue on")


def release_redis_db(client: Any) -> None:
    """Remove what rq and this script left in our database index, then the claim."""
    with contextlib.suppress(Exception):
        for key in client.scan_iter("rq:*", count=1000):
            client.delete(key)
        client.delete(CLAIM_KEY)
        client.close()


# --- rq workers ------------------------------------------------------------------------------


@contextlib.contextmanager
def rq_workers(
    env: dict[str, str], count: int, redis: Any, directory: Path
) -> Iterator[list[subprocess.Popen[Any]]]:
    """`count` non-forking rq workers on the default queue, as `make run` starts them, each a
    process with its own database connection; yields once every one is listening."""
    from rq import Worker

    procs: list[subprocess.Popen[Any]] = []
    logs = []
    try:
        for number in range(count):
            log = (directory / f"rqworker-{number}.log").open("w")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    manage_argv(
                        "rqworker",
                        "default",
                        "--worker-class",
                        "reconcilers.worker.LedgerWorker",
                        "--name",
                        f"bench-recovery-{os.getpid()}-{number}",
                    ),
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 60
        while len(Worker.all(connection=redis)) < count:
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(
                    "rq workers did not start:\n"
                    + (directory / "rqworker-0.log").read_text()[-2000:]
                )
            time.sleep(0.1)
        yield procs
    finally:
        for proc in procs:
            stop_group(proc)
        for log in logs:
            log.close()


# --- The timed part --------------------------------------------------------------------------


def remaining(run_id: str) -> int:
    return sql_rows(
        "SELECT count(*) FROM ledger_effect WHERE run_id = %s AND status = ANY(%s)",
        [run_id, list(UNRESOLVED)],
    )[0][0]


def enqueue_work(opts: Options) -> str:
    """What wakes the workers: the product's sweep (production), or batched drain jobs."""
    if opts.jobs == "sweep":
        from reconcilers.schedules import sweep

        result = sweep()
        return (
            f"sweep(): {result['expired_leases']} leases queued, {result['redriven']} "
            "effects re-driven in check_effects jobs"
        )
    from reconcilers.jobqueue import enqueue

    jobs = math.ceil(opts.effects / opts.drain_limit) + opts.workers
    if not enqueue("drain-checks", [(opts.drain_limit,)] * jobs):
        raise SystemExit("Redis did not take the drain jobs")
    return f"{jobs} drain-checks({opts.drain_limit}) jobs enqueued"


def wait_resolved(
    opts: Options, workers: list[subprocess.Popen[Any]], redis: Any
) -> tuple[float, int]:
    """Poll the ledger until nothing of the run is unresolved, the time is up, or the workers
    sit idle with nothing queued (what is left then waits for a later check: a backoff, or
    review). Returns (seconds, effects left unresolved)."""
    import django_rq
    from rq import Worker
    from rq.registry import FailedJobRegistry

    from reconcilers.jobqueue import QUEUE

    start = time.perf_counter()
    print(f"  {enqueue_work(opts)}", flush=True)
    queue = django_rq.get_queue(QUEUE)
    failed = FailedJobRegistry(QUEUE, connection=redis)
    last_note, idle_since = start, None
    left = remaining(RUN_ID)
    while left:
        now = time.perf_counter()
        if now - start > opts.timeout:
            print(f"  timed out after {opts.timeout:g} s with {left} effects unresolved")
            break
        if any(p.poll() is not None for p in workers):
            print("  a worker exited during the run")
            break
        if now - last_note >= 10:
            done = opts.effects - left
            print(
                f"  {now - start:5.1f} s: {done} resolved ({done / (now - start):.0f}/s), "
                f"{left} to go, {failed.count} failed jobs",
                flush=True,
            )
            last_note = now
        idle = queue.count == 0 and all(
            w.get_state() == "idle" for w in Worker.all(connection=redis)
        )
        idle_since = (idle_since or now) if idle else None
        if idle_since and now - idle_since > 2:
            print(f"  the workers are idle with {left} effects unresolved")
            break
        time.sleep(0.2)  # a count every 0.2 s: little load, ±0.2 s on the wall time
        left = remaining(RUN_ID)
    return time.perf_counter() - start, left


def verify_recovery(report: Report, seeded: Seeded, provider_url: str, charges_before: int) -> None:
    """What the run left: right where it finished (all of it, when it finished)."""
    rows = sql_rows(
        "SELECT e.idempotency_key, e.status, e.provider_ref, "
        "       (SELECT count(*) FROM ledger_effectevent v "
        "         WHERE v.effect_id = e.id AND v.kind = 'reconciliation') "
        "  FROM ledger_effect e WHERE e.run_id = %s",
        [RUN_ID],
    )
    statuses = Counter(r[1] for r in rows)
    report.details["recovery_statuses"] = dict(statuses)
    charged = [r for r in rows if r[0] in seeded.charges and r[1] != "dispatching"]
    uncharged = [r for r in rows if r[0] not in seeded.charges and r[1] != "dispatching"]
    finished = statuses["dispatching"] == 0
    scope = "" if finished else f" (of the {len(charged) + len(uncharged)} resolved)"
    if finished:
        half = len(seeded.charges)
        report.check(
            f"{half} confirmed, {len(rows) - half} planned, nothing else",
            statuses == Counter({"confirmed": half, "planned": len(rows) - half}),
            ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())),
        )
    else:
        report.check(
            "nothing failed, unknown or awaiting confirmation",
            set(statuses) <= {"confirmed", "planned", "dispatching"},
            ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())),
        )
    wrong_ref = [r[0] for r in charged if r[1] != "confirmed" or r[2] != seeded.charges[r[0]]]
    report.check(
        f"every charged effect confirmed with the provider's charge id{scope}",
        not wrong_ref,
        f"{len(wrong_ref)} wrong, e.g. {wrong_ref[:3]}" if wrong_ref else f"{len(charged)} ok",
    )
    wrong_planned = [r[0] for r in uncharged if r[1] != "planned"]
    report.check(
        f"every uncharged effect back to planned (never received, attempts left){scope}",
        not wrong_planned,
        f"{len(wrong_planned)} wrong" if wrong_planned else f"{len(uncharged)} ok",
    )
    events = Counter(r[3] for r in charged + uncharged)
    report.check(
        f"exactly one reconciliation event per effect{scope}",
        set(events) == {1},
        ", ".join(f"{n} effects with {k}" for k, n in sorted(events.items())),
    )
    reviews = sql_rows(
        "SELECT count(*) FROM reviews_reviewitem r JOIN ledger_effect e ON e.id = r.effect_id "
        "WHERE e.run_id = %s",
        [RUN_ID],
    )[0][0]
    report.check("no review item opened", reviews == 0, f"{reviews} opened")
    charges_after = provider_transactions(provider_url)
    report.check(
        "no new charge at the provider (lookups only)",
        charges_after == charges_before,
        f"{charges_before} before, {charges_after} after",
    )


def lookup_latency(provider_url: str, keys: list[str], calls: int = 100) -> dict[str, float]:
    """Per-call latency of a lookup at the provider, single-threaded: the product adapter's
    call (a new httpx client each time), and a plain GET on one keep-alive client."""
    import httpx

    from ledger.models import Effect, Tool
    from reconcilers.providers import adapter_for

    adapter = adapter_for(Tool.objects.get(name=TOOL))
    effects = list(Effect.objects.filter(idempotency_key__in=keys[: calls + 10]))
    for effect in effects[:10]:  # warm up
        adapter.lookup(effect)
    through_adapter = Timer()
    for effect in effects[10:]:
        with through_adapter.timing():
            adapter.lookup(effect)
    keepalive = Timer()
    with httpx.Client(base_url=provider_url, timeout=10, trust_env=False) as client:
        for key in keys[:10]:
            client.get("/charges", params={"idempotency_key": key})
        for key in keys[10 : calls + 10]:
            with keepalive.timing():
                client.get("/charges", params={"idempotency_key": key})
    return {
        "adapter_ms": 1000 * through_adapter.seconds / through_adapter.calls,
        "adapter_cpu_ms": 1000 * through_adapter.cpu / through_adapter.calls,
        "keepalive_ms": 1000 * keepalive.seconds / keepalive.calls,
        "keepalive_cpu_ms": 1000 * keepalive.cpu / keepalive.calls,
    }


# --- All of it -------------------------------------------------------------------------------


def run_recovery(
    opts: Options,
    report: Report,
    env: dict[str, str],
    agent_id: int,
    redis: Any,
    provider_url: str,
    provider: SandboxProcess,
    directory: Path,
    db_name: str,
) -> None:
    print(
        f"\nRecovery: {opts.effects} {TOOL} effects in dispatching, leases expired 10 min ago, "
        "half of them charged at the provider.",
        flush=True,
    )
    start = time.perf_counter()
    seeded = seed(agent_id, RUN_ID, opts.effects, provider_url)
    charges_before = provider_transactions(provider_url)
    print(
        f"  seeded in {time.perf_counter() - start:.1f} s: {len(seeded.ids)} effects, "
        f"{len(seeded.charges)} charges at the provider (not timed)",
        flush=True,
    )

    latency = lookup_latency(provider_url, seeded.keys)
    report.details["lookup_latency_ms"] = latency
    print(
        f"  provider lookup, one thread: {latency['adapter_ms']:.2f} ms per call "
        f"({latency['adapter_cpu_ms']:.2f} ms CPU here) through the product adapter, "
        f"{latency['keepalive_ms']:.2f} ms ({latency['keepalive_cpu_ms']:.2f} ms CPU) on one "
        "keep-alive httpx client",
        flush=True,
    )

    label = "sweep → check_effects jobs" if opts.jobs == "sweep" else "drain jobs"
    with rq_workers(env, opts.workers, redis, directory) as workers:
        print(
            f"  {opts.workers} rq.SimpleWorker processes listening; timing starts ({label})",
            flush=True,
        )
        worker_pids = {p.pid for p in workers}
        cpu = CpuWindow(
            {
                "rq workers": lambda p: p.pid in worker_pids,
                "sandbox provider": lambda p: p.pid == provider.pid,
                "bench driver (polling)": lambda p: p.pid == os.getpid(),
                "postgres": lambda p: (
                    p.title.startswith("postgres") and (db_name in p.title or "(" not in p.title)
                ),
            }
        )
        cpu.start()
        seconds, left = wait_resolved(opts, workers, redis)
        cpu.stop()
    resolved = opts.effects - left
    rate = resolved / seconds
    print(
        f"  resolved {resolved} of {opts.effects} in {seconds:.2f} s: {rate:.0f} effects/s",
        flush=True,
    )
    print_cpu(cpu, seconds, max(resolved, 1))
    report.details["recovery_cpu_seconds"] = cpu.seconds
    report.details["recovery"] = {
        "seconds": seconds,
        "effects": opts.effects,
        "resolved": resolved,
        "rate": rate,
        "jobs": opts.jobs,
        "workers": opts.workers,
    }
    report.rows += [
        Row(
            f"recovery: effects resolved/s ({opts.workers} rq workers, {label})",
            rate,
            "/s",
            f"≥ {RECOVERY_GOAL:g}",
            rate >= RECOVERY_GOAL,
        ),
        Row(
            f"recovery: resolved of {opts.effects} (timeout {opts.timeout:g} s)",
            resolved,
            "",
            "all",
            left == 0,
        ),
        Row("recovery: wall time", seconds, "s"),
        cpu_row(cpu, max(resolved, 1)),
        Row("provider lookup through the product adapter", latency["adapter_ms"], "ms"),
        Row("provider lookup on a keep-alive client", latency["keepalive_ms"], "ms"),
    ]
    print("  checks:")
    verify_recovery(report, seeded, provider_url, charges_before)

    if opts.profile_effects:
        profile = profile_checker(opts, agent_id, provider_url)
        summary = print_profile(profile)
        report.details["checker_profile"] = summary
        report.rows.append(Row("one check, in-process, single-threaded", summary["wall_ms"], "ms"))


def cpu_row(cpu: CpuWindow, effects: int) -> Row:
    """CPU per effect of everything the recovery runs on (workers, PostgreSQL, provider): the
    noise-resistant twin of the rate. The goal's budget: all cores busy at the goal rate."""
    used = sum(s for party, s in cpu.seconds.items() if party not in ("idle", "other"))
    budget = 1000 * (os.cpu_count() or 1) / RECOVERY_GOAL
    value = 1000 * used / effects if cpu.seconds else None
    return Row(
        "recovery: CPU per effect (workers + PostgreSQL + provider)",
        value,
        "ms",
        f"≤ {budget:.1f} (cores ÷ goal)",
        None if value is None else value <= budget,
    )


def print_cpu(cpu: CpuWindow, seconds: float, effects: int) -> None:
    if not cpu.seconds:
        return
    capacity = seconds * (os.cpu_count() or 1)
    print(
        "  CPU per resolved effect: "
        + ", ".join(
            f"{party} {1000 * s / effects:.2f} ms"
            for party, s in sorted(cpu.seconds.items(), key=lambda kv: -kv[1])
            if party != "idle"
        )
        + f"; idle {100 * cpu.seconds['idle'] / capacity:.0f}% of the machine",
        flush=True,
    )
    other = cpu.seconds.get("other", 0.0) / capacity
    if other > 0.1:
        print(
            f"  warning: other processes used {100 * other:.0f}% of the machine during the run; "
            "the rate is lower than on a quiet machine (CPU ms per effect are steadier)"
        )
