"""Recovery after a crash, and the escalation sweep, measured against goals and raw SQL.

1. **Recovery.** 10,000 `charge_card` effects are left in `dispatching` with leases that
   expired ten minutes ago, as a crashed fleet of agents would leave them; half of them were
   charged at the sandbox payments provider (under the effect's idempotency key), half never
   arrived. The product's own machinery then resolves them: the django-q2 sweep
   (`reconcilers.schedules.sweep`, called here once) enqueues `check_effects` jobs of 200 ids,
   and two `manage.py rqworker default --worker-class rq.SimpleWorker` processes — what
   `make run` starts — run them. Measured: wall time from the sweep until no effect is left
   in dispatching / awaiting_confirmation / unknown, as effects/s (goal ≥ 300). Checked:
   5,000 confirmed with the provider's charge id, 5,000 planned (not found, settle_after
   passed, attempts left), none failed or unknown, one `reconciliation` event each, no review
   item, and not one new charge at the provider. `--jobs drain` feeds the workers batched
   `reconcilers.jobs.drain` jobs instead.

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
   `reviews.escalation.escalate()` runs in-process (best of 3, review items deleted between
   runs; it must open exactly 10,000) against, in the same rounds, a raw `SELECT id … WHERE
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
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    CLOCK_TICKS,
    ROOT,
    bench_database,
    code_version,
    drop_database,
    fresh_database,
    machine_ticks,
    print_grid,
    process_ticks,
    run_stoppable,
    stop_group,
)

RESULT_FILE = ROOT / "var" / "bench" / "recovery.json"
RECOVERY_GOAL = 300.0  # effects resolved per second, two workers
ESCALATION_GOAL = 1.0  # seconds for one escalation sweep over 1M effects
TOOL = "charge_card"
RUN_ID = "bench-recovery"
PROFILE_RUN_ID = "bench-recovery-profile"
OWNER = "bench-agent-1"
REQUEST = {"amount": "10.00", "currency": "EUR"}
LEASE_SECONDS = 60
INCOMPLETE = ("planned", "dispatching", "awaiting_confirmation", "unknown")
UNRESOLVED = ("dispatching", "awaiting_confirmation", "unknown")
READY = re.compile(r"sandbox \w+ listening on (http://\S+)")


# --- Options ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    effects: int
    workers: int
    jobs: str
    drain_limit: int
    timeout: float
    profile_effects: int
    total: int
    stale: int
    repeats: int
    explain: bool
    keep_db: bool
    skip_recovery: bool
    skip_escalation: bool


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--effects", type=int, default=10_000, help="effects left dispatching (10000)"
    )
    parser.add_argument("--workers", type=int, default=2, help="rq SimpleWorker processes (2)")
    parser.add_argument(
        "--jobs",
        choices=("sweep", "drain"),
        default="sweep",
        help="sweep: the product's sweep enqueues check_effects jobs (production); "
        "drain: batched reconcilers.jobs.drain jobs (sweep)",
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
    return Options(
        effects=args.effects,
        workers=args.workers,
        jobs=args.jobs,
        drain_limit=args.drain_limit,
        timeout=args.timeout,
        profile_effects=max(0, args.profile_effects),
        total=args.total,
        stale=args.stale,
        repeats=args.repeats,
        explain=args.explain,
        keep_db=args.keep_db,
        skip_recovery=args.skip_recovery,
        skip_escalation=args.skip_escalation,
    )


# --- Results ---------------------------------------------------------------------------------


@dataclass
class Row:
    measurement: str
    value: float | None
    unit: str
    goal: str = "reported"
    met: bool | None = None  # None: no goal


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks[name] = ok
        print(f"  [{'ok' if ok else 'FAILED'}] {name}{f': {detail}' if detail else ''}")
        return ok

    @property
    def correct(self) -> bool:
        return all(self.checks.values())


# --- Databases -------------------------------------------------------------------------------


def drop_quietly(base_url: str, name: str) -> None:
    try:
        drop_database(base_url, name)
    except Exception as exc:  # the run's result matters more than the cleanup
        print(f"could not drop {name}: {exc}", file=sys.stderr)


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


# --- Processes we start ----------------------------------------------------------------------


@contextlib.contextmanager
def sandbox_payments(directory: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The sandbox payments provider on a free port with a store in `directory`."""
    log = (directory / "payments.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconcilers.sandbox.payments",
            "--port",
            "0",
            "--store",
            str(directory / "payments.sqlite3"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the provider prints its address once it listens
        match = READY.search(line)
        if not match:
            raise RuntimeError(f"the sandbox payments provider did not start: {line!r}")
        yield match.group(1), proc
    finally:
        stop_group(proc, grace=5)
        if proc.stdout is not None:
            proc.stdout.close()
        log.close()


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
                    [
                        sys.executable,
                        "manage.py",
                        "rqworker",
                        "default",
                        "--worker-class",
                        "rq.SimpleWorker",
                        "--name",
                        f"bench-recovery-{os.getpid()}-{number}",
                    ],
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


# --- CPU accounting --------------------------------------------------------------------------


def _proc_ticks() -> dict[int, tuple[str, int]]:
    """pid → (command line, user + system ticks) for every process we can read."""
    ticks: dict[int, tuple[str, int]] = {}
    for pid, _comm, _pgrp, used in process_ticks():
        try:
            cmdline = Path("/proc", str(pid), "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ticks[pid] = (cmdline, used)
    return ticks


@dataclass
class CpuWindow:
    """CPU seconds per party between `start()` and `stop()`, read from /proc."""

    parties: dict[str, Callable[[int, str], bool]]
    before: dict[int, tuple[str, int]] = field(default_factory=dict)
    machine_before: tuple[int, int] = (0, 0)
    seconds: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        with contextlib.suppress(OSError):
            self.before, self.machine_before = _proc_ticks(), machine_ticks()

    def stop(self) -> None:
        try:
            after, (total, busy) = _proc_ticks(), machine_ticks()
        except OSError:
            return
        used: Counter[str] = Counter()
        for pid, (cmdline, ticks) in after.items():
            delta = ticks - self.before.get(pid, (cmdline, 0))[1]
            party = next((p for p, match in self.parties.items() if match(pid, cmdline)), "other")
            used[party] += delta
        used["idle"] = (total - self.machine_before[0]) - (busy - self.machine_before[1])
        self.seconds = {k: v / CLOCK_TICKS for k, v in used.items()}


# --- Django, configured for the bench database -----------------------------------------------


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(
        DATABASE_URL=env["DATABASE_URL"],
        REDIS_URL=env["REDIS_URL"],
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="false",
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()


def sql_rows(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def sql_exec(sql: str, params: Any = None) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


# --- Recovery: the crashed fleet's effects ---------------------------------------------------


@dataclass
class Seeded:
    ids: list[str]
    keys: list[str]  # idempotency keys, in the order of ids
    charges: dict[str, str]  # idempotency key → the provider's charge id (the charged half)


def seed_dispatching(agent_id: int, run_id: str, count: int) -> tuple[list[str], list[str]]:
    """`count` charge_card effects as the API leaves them after intent + claim, whose lease
    expired ten minutes ago and which the lease sweep has queued (next_check_at =
    lease_expires_at); with their intent and claim events. Returns (ids, idempotency keys)."""
    from ledger import digests
    from ledger.models import Tool

    max_attempts = Tool.objects.get(name=TOOL).max_attempts
    ids = [str(uuid.uuid4()) for _ in range(count)]
    effect_keys = [f"{run_id}:step-{i}" for i in range(1, count + 1)]
    targets = [f"acct_{i % 977:04d}" for i in range(1, count + 1)]
    keys = [digests.idempotency_key(agent_id, k) for k in effect_keys]
    hashes = [digests.request_hash(TOOL, t, REQUEST) for t in targets]
    tokens = [uuid.uuid4().hex for _ in range(count)]
    sql_exec(
        """
        INSERT INTO ledger_effect (
            id, agent_id, effect_key, run_id, step_id, seq, kind, tool, target, request,
            request_hash, idempotency_key, status, attempt, max_attempts, lease_owner,
            lease_token, claim_id, lease_seconds, lease_expires_at, next_check_at, checks,
            left_dispatch_at, confirm_deadline, provider_ref, response, error, outcome_digest,
            outcome_token, parent_id, provenance, created_at, updated_at, resolved_at, version)
        SELECT u.id, %(agent)s, u.effect_key, %(run)s, 'step-' || u.n, u.n, 'action', %(tool)s,
               u.target, %(request)s::jsonb, u.hash, u.key, 'dispatching', 1, %(max)s,
               %(owner)s, u.token, NULL, %(lease)s, now() - interval '10 minutes',
               now() - interval '10 minutes', 0, NULL, NULL, '', NULL, NULL, '', '', NULL,
               '{}'::jsonb, now() - interval '11 minutes', now() - interval '11 minutes', NULL, 2
          FROM unnest(%(ids)s::uuid[], %(effect_keys)s::text[], %(targets)s::text[],
                      %(hashes)s::text[], %(keys)s::text[], %(tokens)s::text[])
               WITH ORDINALITY AS u(id, effect_key, target, hash, key, token, n)
        """,
        {
            "agent": agent_id,
            "run": run_id,
            "tool": TOOL,
            "request": json.dumps(REQUEST),
            "max": max_attempts,
            "owner": OWNER,
            "lease": LEASE_SECONDS,
            "ids": ids,
            "effect_keys": effect_keys,
            "targets": targets,
            "hashes": hashes,
            "keys": keys,
            "tokens": tokens,
        },
    )
    intent_data = [{"request_hash": h, "depends_on": []} for h in hashes]
    claim_data = {"owner": OWNER, "claim_id": None, "lease_seconds": LEASE_SECONDS}
    sql_exec(
        """
        INSERT INTO ledger_effectevent
               (effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
        SELECT u.id, 'intent', %(actor)s, '', 'planned', 'intent', u.data::jsonb, u.digest,
               now() - interval '11 minutes'
          FROM unnest(%(ids)s::uuid[], %(data)s::text[], %(digests)s::text[]) AS u(id, data, digest)
        UNION ALL
        SELECT u.id, 'transition', %(actor)s, 'planned', 'dispatching', 'claimed',
               %(claim)s::jsonb, %(claim_digest)s, now() - interval '11 minutes'
          FROM unnest(%(ids)s::uuid[]) AS u(id)
        """,
        {
            "actor": "agent:bench",
            "ids": ids,
            "data": [json.dumps(d) for d in intent_data],
            "digests": [digests.content_digest(d) for d in intent_data],
            "claim": json.dumps(claim_data),
            "claim_digest": digests.content_digest(claim_data),
        },
    )
    sql_exec(
        "INSERT INTO ledger_run (agent_id, run_id, last_seq, created_at) "
        "VALUES (%s, %s, %s, now() - interval '11 minutes')",
        [agent_id, run_id, count],
    )
    return ids, keys


def charge_at_provider(base_url: str, effects: list[tuple[str, str]]) -> dict[str, str]:
    """POST /charges for each (idempotency key, account), concurrently, as the crashed agents
    did before they died. Returns key → charge id."""
    import httpx

    local = threading.local()

    def charge(item: tuple[str, str]) -> tuple[str, str]:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=base_url, timeout=30, trust_env=False)
        key, account = item
        response = local.client.post(
            "/charges", json={**REQUEST, "account": account}, headers={"Idempotency-Key": key}
        )
        if response.status_code != 201:
            raise RuntimeError(f"charge for {key}: {response.status_code} {response.text[:200]}")
        return key, response.json()["id"]

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(charge, effects))


def seed(agent_id: int, run_id: str, count: int, provider_url: str) -> Seeded:
    ids, keys = seed_dispatching(agent_id, run_id, count)
    targets = dict(
        sql_rows("SELECT idempotency_key, target FROM ledger_effect WHERE run_id = %s", [run_id])
    )
    charged = [(k, targets[k]) for k in keys[::2]]  # every other one reached the provider
    return Seeded(ids, keys, charge_at_provider(provider_url, charged))


def provider_transactions(base_url: str) -> int:
    import httpx

    with httpx.Client(base_url=base_url, timeout=30, trust_env=False) as client:
        response = client.get("/_sandbox/transactions")
        response.raise_for_status()
        return len(response.json()["data"])


# --- Recovery: the timed part ----------------------------------------------------------------


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
    import django_rq

    from reconcilers.queue import JOB_TIMEOUT, QUEUE

    queue = django_rq.get_queue(QUEUE)
    jobs = math.ceil(opts.effects / opts.drain_limit) + opts.workers
    for _ in range(jobs):
        queue.enqueue("reconcilers.jobs.drain", opts.drain_limit, job_timeout=JOB_TIMEOUT)
    return f"{jobs} reconcilers.jobs.drain({opts.drain_limit}) jobs enqueued"


def wait_resolved(
    opts: Options, workers: list[subprocess.Popen[Any]], redis: Any
) -> tuple[float, int]:
    """Poll the ledger until nothing of the run is unresolved, the time is up, or the workers
    sit idle with nothing queued (what is left then waits for a later check: a backoff, or
    review). Returns (seconds, effects left unresolved)."""
    import django_rq
    from rq import Worker
    from rq.registry import FailedJobRegistry

    from reconcilers.queue import QUEUE

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


# --- Recovery: where a check's time goes -----------------------------------------------------


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

    import reconcilers.payments as payments
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


def lookup_latency(provider_url: str, keys: list[str], calls: int = 100) -> dict[str, float]:
    """Per-call latency of a lookup at the provider, single-threaded: the product adapter's
    call (a new httpx client each time), and a plain GET on one keep-alive client."""
    import httpx

    from ledger.models import Effect, Tool
    from reconcilers.adapters import adapter_for

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


# --- Recovery: all of it ---------------------------------------------------------------------


def run_recovery(
    opts: Options,
    report: Report,
    env: dict[str, str],
    agent_id: int,
    redis: Any,
    provider_url: str,
    provider: subprocess.Popen[Any],
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
                "rq workers": lambda pid, _: pid in worker_pids,
                "sandbox provider": lambda pid, _: pid == provider.pid,
                "bench driver (polling)": lambda pid, _: pid == os.getpid(),
                "postgres": lambda _, cmd: (
                    cmd.startswith("postgres") and (db_name in cmd or "(" not in cmd)
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
            f"recovery: effects resolved/s ({opts.workers} rq SimpleWorkers, {label})",
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


# --- Escalation ------------------------------------------------------------------------------


def fill_to(total: int, stale: int, agent_id: int) -> int:
    """Add effects until the table holds `total`, in creation order as a real table fills up:
    60 days of history, mostly confirmed. Among the rows older than 25 h, `stale` evenly
    spread ones are non-terminal (planned, dispatching, awaiting_confirmation, unknown); among
    the last day's rows, every other one is. Ids, keys and runs grow with creation time (like
    time-ordered UUIDs), which keeps generating a million rows to seconds. Returns how many
    rows were added."""
    existing = sql_rows("SELECT count(*) FROM ledger_effect")[0][0]
    add = total - existing
    old = add - add // 60  # rows created before the last day
    if old < stale:
        raise RuntimeError(f"the table already holds {existing} effects; cannot add {stale} stale")
    sql_exec(
        """
        INSERT INTO ledger_effect (
            id, agent_id, effect_key, run_id, step_id, seq, kind, tool, target, request,
            request_hash, idempotency_key, status, attempt, max_attempts, lease_owner,
            lease_token, claim_id, lease_seconds, lease_expires_at, next_check_at, checks,
            left_dispatch_at, confirm_deadline, provider_ref, response, error, outcome_digest,
            outcome_token, parent_id, provenance, created_at, updated_at, resolved_at, version)
        SELECT (lpad(to_hex(g), 12, '0') || left(md5(g::text), 20))::uuid, %(agent)s,
               'esc:' || lpad(g::text, 8, '0'), 'esc-' || lpad((g / 20)::text, 7, '0'),
               'step-' || g, g %% 20 + 1, 'action',
               (ARRAY['charge_card', 'refund_card', 'get_balance', 'create_ticket',
                      'send_email'])[g %% 5 + 1],
               'acct_' || (g %% 977), %(request)s::jsonb, 'v1:' || md5(g::text),
               'el_' || lpad(to_hex(g), 8, '0') || left(md5('k' || g), 24), x.status, 1, 3,
               'bench-agent', NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL,
               CASE WHEN x.status = 'confirmed' THEN 'ch_' || left(md5('c' || g), 24) ELSE '' END,
               NULL, NULL, '', '', NULL, '{}'::jsonb, x.created_at, x.created_at,
               CASE WHEN x.status = 'confirmed' THEN x.created_at + interval '2 seconds' END,
               CASE WHEN x.status = 'confirmed' THEN 3 ELSE 2 END
          FROM generate_series(1, %(add)s) g
          CROSS JOIN LATERAL (
              SELECT CASE
                       WHEN g <= %(old)s AND g %% %(step)s = 0 AND g / %(step)s <= %(stale)s
                       THEN (ARRAY['planned', 'dispatching', 'awaiting_confirmation',
                                   'unknown'])[(g / %(step)s) %% 4 + 1]
                       WHEN g > %(old)s AND g %% 2 = 0
                       THEN (ARRAY['planned', 'dispatching', 'awaiting_confirmation',
                                   'unknown'])[(g / 2) %% 4 + 1]
                       ELSE 'confirmed' END AS status,
                     CASE
                       WHEN g <= %(old)s
                       THEN now() - interval '60 days'
                            + (g::float8 / %(old)s) * (interval '60 days' - interval '25 hours')
                       ELSE now() - interval '23 hours'
                            + ((g - %(old)s)::float8 / (%(add)s - %(old)s))
                              * interval '22 hours 59 minutes' END AS created_at
          ) x
        """,
        {
            "agent": agent_id,
            "request": json.dumps(REQUEST),
            "add": add,
            "old": old,
            "stale": stale,
            "step": old // stale,
        },
    )
    return add


def capture_escalation_sql() -> tuple[str, Any]:
    """The statement `escalate()` runs, with its parameters (run once and rolled back)."""
    from django.db import connection, transaction

    from reviews.escalation import escalate

    captured: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with contextlib.suppress(_Rollback), transaction.atomic():
        with connection.execute_wrapper(capture):
            escalate()
        raise _Rollback
    return captured[-1]


class _Rollback(Exception):
    pass


RAW_SELECT = (
    "SELECT id FROM ledger_effect WHERE status IN ('planned', 'dispatching', "
    "'awaiting_confirmation', 'unknown') AND created_at < now() - interval '24 hours'"
)
RAW_INSERT = (
    "INSERT INTO reviews_reviewitem (effect_id, reason, opened_at, due_at, resolution) "
    "SELECT id, 'unresolved_past_window', now(), now() + interval '7 days', '' FROM ("
    + RAW_SELECT
    + ") s ON CONFLICT (effect_id) WHERE resolved_at IS NULL DO NOTHING"
)


def selection_of(statement: str) -> str:
    """The escalation statement with its INSERT replaced by a plain SELECT of the candidates."""
    head, found, _ = statement.partition("INSERT INTO")
    if not found:
        raise ValueError("the escalation statement has no INSERT INTO")
    return head + "SELECT id FROM overdue"


def clear_reviews() -> None:
    sql_exec("DELETE FROM reviews_reviewitem")
    sql_exec("VACUUM reviews_reviewitem")


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def plan_summary(sql: str, params: Any) -> str:
    """How a statement reads ledger_effect: 'Bitmap Index Scan on effect_unresolved_age_idx'."""
    plan = sql_rows(f"EXPLAIN (FORMAT JSON) {sql}", params)[0][0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    scans: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        index = node.get("Index Name", "")
        if index.startswith(("effect_", "ledger_effect")):
            scans.append(f"{node['Node Type']} on {index}")
        elif node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "ledger_effect":
            scans.append("Seq Scan on ledger_effect")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return ", ".join(scans) or "no scan of ledger_effect"


def explain(title: str, sql: str, params: Any, *, write: bool = False) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS); a writing statement runs in a transaction that is rolled
    back, with constraints made immediate so that the deferred foreign-key checks show."""
    from django.db import transaction

    lines: list[str] = []
    with contextlib.suppress(_Rollback), transaction.atomic():
        if write:
            sql_exec("SET CONSTRAINTS ALL IMMEDIATE")
        lines = [r[0] for r in sql_rows(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)]
        raise _Rollback
    print(f"\n{title}:")
    for line in lines:
        print(f"  {line}")
    return lines


def run_escalation(opts: Options, report: Report, agent_id: int) -> None:
    from reviews.escalation import escalate

    print(f"\nEscalation: {opts.total} effects, {opts.stale} of them stale.", flush=True)
    start = time.perf_counter()
    added = fill_to(opts.total, opts.stale, agent_id)
    generated = time.perf_counter() - start
    sql_exec("VACUUM ANALYZE ledger_effect")
    print(
        f"  generated {added} effects in {generated:.1f} s, VACUUM ANALYZE in "
        f"{time.perf_counter() - start - generated:.1f} s (not timed)",
        flush=True,
    )
    counts = dict(sql_rows("SELECT status, count(*) FROM ledger_effect GROUP BY status"))
    report.details["escalation_table"] = counts
    print("  table: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    stale_now = len(sql_rows(RAW_SELECT))
    report.check(
        f"the raw query finds exactly {opts.stale} stale effects",
        stale_now == opts.stale,
        f"{stale_now}",
    )

    statement, params = capture_escalation_sql()
    selection = selection_of(statement)
    plans = {
        "escalate()": plan_summary(selection, params),
        "raw SELECT": plan_summary(RAW_SELECT, None),
    }
    report.details["plans"] = plans
    for name, plan in plans.items():
        print(f"  {name} plan: {plan}")

    runs: dict[str, list[float]] = defaultdict(list)
    opened: list[int] = []
    for number in range(opts.repeats):
        clear_reviews()
        seconds, count = timed(escalate)
        runs["escalate"].append(seconds)
        opened.append(count)
        seconds, rows = timed(lambda: sql_rows(RAW_SELECT))
        runs["select"].append(seconds)
        clear_reviews()
        seconds, count_raw = timed(lambda: sql_exec(RAW_INSERT))
        runs["insert"].append(seconds)
        print(
            f"  run {number + 1}: escalate() {1000 * runs['escalate'][-1]:.0f} ms "
            f"({opened[-1]} opened), raw SELECT {1000 * runs['select'][-1]:.0f} ms "
            f"({len(rows)} rows), raw INSERT … SELECT {1000 * seconds:.0f} ms "
            f"({count_raw} rows)",
            flush=True,
        )
    clear_reviews()
    escalate()
    repeat_seconds, repeat_count = timed(escalate)
    print(
        f"  repeat sweep with every item already open: {1000 * repeat_seconds:.0f} ms, "
        f"{repeat_count} opened"
    )
    open_items = sql_rows("SELECT count(*) FROM reviews_reviewitem WHERE resolved_at IS NULL")[0][0]
    clear_reviews()

    report.check(
        f"escalate() opened exactly {opts.stale} review items every run",
        all(n == opts.stale for n in opened),
        f"{opened}",
    )
    report.check(
        "a repeat sweep opens nothing (one open item per effect)",
        repeat_count == 0 and open_items == opts.stale,
        f"{repeat_count} opened, {open_items} open",
    )

    best = {k: min(v) for k, v in runs.items()}
    report.details["escalation_seconds"] = dict(runs)
    report.rows += [
        Row(
            f"escalation: escalate() over {opts.total} effects (best of {opts.repeats})",
            best["escalate"],
            "s",
            f"< {ESCALATION_GOAL:g}",
            best["escalate"] < ESCALATION_GOAL,
        ),
        Row("escalation: raw SELECT, same selection (best)", best["select"], "s"),
        Row("escalation: escalate() ÷ raw SELECT", best["escalate"] / best["select"], "×"),
        Row("escalation: raw INSERT … SELECT, same rows (best)", best["insert"], "s"),
        Row("escalation: repeat sweep, nothing new", repeat_seconds, "s"),
    ]
    if opts.explain:
        report.details["explain"] = {
            "escalate_selection": explain(
                "EXPLAIN (ANALYZE, BUFFERS) of escalate()'s selection", selection, params
            ),
            "raw_select": explain("EXPLAIN (ANALYZE, BUFFERS) of the raw query", RAW_SELECT, None),
            "escalate_statement": explain(
                "EXPLAIN (ANALYZE, BUFFERS) of the whole escalation statement (rolled back; "
                "constraints immediate, so the foreign-key trigger shows)",
                statement,
                params,
                write=True,
            ),
        }


# --- Output ----------------------------------------------------------------------------------


def _value(row: Row) -> str:
    if row.value is None:
        return "–"
    if row.unit == "s":
        return f"{row.value:.3f} s" if row.value < 10 else f"{row.value:.1f} s"
    if row.unit == "ms":
        return f"{row.value:.2f} ms"
    if row.unit == "×":
        return f"{row.value:.2f}×"
    return f"{row.value:.0f}{row.unit}"


def print_table(report: Report) -> None:
    rows = [
        (r.measurement, _value(r), r.goal, "–" if r.met is None else ("yes" if r.met else "NO"))
        for r in report.rows
    ]
    rows.append(
        (
            "correctness checks",
            f"{sum(report.checks.values())}/{len(report.checks)}",
            "all pass",
            "yes" if report.correct else "NO",
        )
    )
    print()
    print_grid(("measurement", "value", "goal", "met?"), rows)


def write_result(report: Report, opts: Options) -> None:
    RESULT_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULT_FILE.write_text(
        json.dumps(
            {
                "code": code_version(),
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                },
                "options": asdict(opts),
                "rows": [asdict(r) for r in report.rows],
                "checks": report.checks,
                "correct": report.correct,
                "details": report.details,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"\nwritten to {RESULT_FILE.relative_to(ROOT)}")


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
        env, _ = fresh_database(base_url, name, ["bench"], REDIS_URL=redis_url)
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
            provider_url, provider = stack.enter_context(sandbox_payments(directory))
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
    write_result(report, opts)
    if not report.correct:
        print(
            "correctness checks failed: " + ", ".join(k for k, v in report.checks.items() if not v)
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    return run_stoppable(lambda: benchmark(opts), restore_sigint=True)


if __name__ == "__main__":
    sys.exit(main())
