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
import cProfile
import dataclasses
import http.client
import io
import json
import multiprocessing
import os
import platform
import pstats
import resource
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    CLOCK_TICKS,
    ROOT,
    bench_database,
    database_url,
    drop_database,
    fresh_database,
    machine_ticks,
    print_grid,
    process_ticks,
    recreate_database,
    run_stoppable,
    stop_group,
)

RESULT_FILE = ROOT / "var" / "bench" / "lifecycle.json"
LEDGER_GOAL = 0.5  # ledger ÷ bare WSGI
DBOS_GOAL = 1.0  # ledger lifecycles/s ÷ DBOS steps/s
MAX_ERROR_SAMPLES = 5
BENCH_DB = "bench"  # the benchmark database: <DATABASE_URL's database>_bench


# --- Options ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    clients: int
    rounds: int
    duration: float
    warmup: float
    workers: int
    threads: int
    client_processes: int
    reconnect_every: int
    skip_dbos: bool
    keep_db: bool
    profile: bool
    profile_lifecycles: int


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
    opts = Options(
        clients=args.clients,
        rounds=args.rounds,
        duration=args.duration,
        warmup=args.warmup,
        workers=args.workers,
        threads=args.threads,
        client_processes=max(1, min(args.client_processes, args.clients)),
        reconnect_every=max(0, args.reconnect_every),
        skip_dbos=args.skip_dbos,
        keep_db=args.keep_db,
        profile=args.profile,
        profile_lifecycles=args.profile_lifecycles,
    )
    return opts, args


# --- Databases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchDatabase:
    url: str
    env: dict[str, str]  # the environment for manage.py and gunicorn
    ledger_key: str
    baseline_key: str


def prepare_database(base_url: str) -> BenchDatabase:
    """A fresh `<name>_bench` database, migrated, with the tools and two agents."""
    name = bench_database(base_url, BENCH_DB)
    OWN_DATABASES.add(name)
    env, (ledger_key, baseline_key) = fresh_database(base_url, name, ["bench", "bench-baseline"])
    return BenchDatabase(
        url=env["DATABASE_URL"], env=env, ledger_key=ledger_key, baseline_key=baseline_key
    )


# --- Processes we start ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    base_url: str
    proc: subprocess.Popen[Any]
    label: str


@contextlib.contextmanager
def gunicorn(app: str, env: dict[str, str], opts: Options) -> Iterator[Server]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        "--bind",
        f"127.0.0.1:{port}",
        "--worker-class",
        "gthread",
        "--workers",
        str(opts.workers),
        "--threads",
        str(opts.threads),
        "--chdir",
        str(ROOT),
        "--log-level",
        "warning",
        "--graceful-timeout",
        "5",
        "--keep-alive",
        "5",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    server = Server(
        f"http://127.0.0.1:{port}", proc, f"gunicorn gthread {opts.workers}w×{opts.threads}t"
    )
    try:
        wait_healthy(server)
        yield server
    finally:
        stop_group(proc)


def wait_healthy(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    host, port = urlsplit(server.base_url).hostname, urlsplit(server.base_url).port
    last = "no answer"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.proc.returncode}")
        try:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            conn.request("GET", "/api/v1/health")
            response = conn.getresponse()
            body = response.read()
            conn.close()
            if response.status == 200:
                return
            last = f"{response.status} {body[:200]!r}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise RuntimeError(f"{server.base_url}/api/v1/health did not answer 200: {last}")


# --- CPU accounting --------------------------------------------------------------------------


@dataclass
class CpuSample:
    at: float
    total_ticks: int  # all CPUs, busy + idle
    busy_ticks: int
    per_pid: dict[int, tuple[str, int, int]]  # pid -> (name, pgrp, utime + stime)


# The databases this run created: PostgreSQL backends serving them count as "postgres";
# backends of other databases (other people's test runs on a shared server) as "other".
OWN_DATABASES: set[str] = set()


def _process_name(pid: int, comm: str) -> str:
    """`comm`, or for PostgreSQL the process title ("postgres: 15/main: user db host …")."""
    if not comm.startswith("postgres"):
        return comm
    try:
        return Path("/proc", str(pid), "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return comm


def cpu_sample() -> CpuSample | None:
    """Per-process and machine CPU counters from /proc (None where there is no /proc)."""
    try:
        total, busy = machine_ticks()
    except OSError:
        return None
    per_pid = {
        pid: (_process_name(pid, comm), pgrp, ticks) for pid, comm, pgrp, ticks in process_ticks()
    }
    return CpuSample(time.monotonic(), total, busy, per_pid)


def _is_ours(title: str) -> bool:
    """A PostgreSQL process of this run: a backend of one of our databases, or one of the
    server's own processes (WAL writer, checkpointer …), which do our commits' work too."""
    words = title.split()
    if len(words) < 5 or not any("(" in w or w == "[local]" for w in words):
        return True  # not a client backend: an auxiliary process
    return any(db in words for db in OWN_DATABASES)


PARTIES = ("load generator", "server", "postgres", "other", "idle")


def cpu_split(
    before: CpuSample | None,
    after: CpuSample | None,
    *,
    load_pids: set[int],
    server_pgid: int | None,
) -> dict[str, float]:
    """CPU seconds each party used in the window; `idle` is the unused rest of all cores."""
    if before is None or after is None or after.total_ticks <= before.total_ticks:
        return {}
    used = dict.fromkeys(PARTIES, 0)
    for pid, (comm, pgrp, ticks) in after.per_pid.items():
        delta = ticks - before.per_pid.get(pid, (comm, pgrp, 0))[2]
        if pid in load_pids:
            used["load generator"] += delta
        elif server_pgid is not None and pgrp == server_pgid:
            used["server"] += delta
        elif comm.startswith("postgres") and _is_ours(comm):
            used["postgres"] += delta
        else:
            used["other"] += delta
    capacity = after.total_ticks - before.total_ticks
    used["idle"] = capacity - (after.busy_ticks - before.busy_ticks)
    return {k: v / CLOCK_TICKS for k, v in used.items()}


# --- Lifecycles ------------------------------------------------------------------------------


class LifecycleError(Exception):
    pass


class Session(Protocol):
    def lifecycle(self, step: int) -> None: ...

    def close(self) -> None: ...


# One client's view of a payment-like request: card number, CVC and a tax id give redaction
# real work; the millisecond timestamp is on charge_card's card-scan allow-list.
def intent_body(run_id: str, step: int, owner: str) -> bytes:
    return json.dumps(
        {
            "run_id": run_id,
            "step_id": f"step-{step}",
            "tool": "charge_card",
            "target": "merchant:acct_4821",
            "request": {
                "amount": 49.95,
                "currency": "EUR",
                "description": f"Order {run_id}/{step}: 3 items",
                "card": {
                    "number": "4242 4242 4242 4242",
                    "cvc": "123",
                    "exp_month": 12,
                    "exp_year": 2030,
                    "holder": "Ada Lovelace",
                },
                "customer": {"email": "ada@example.com", "tax_id": "DE123456789"},
                "timestamp_ms": 1733140000000,
                "metadata": {"cart_items": 3, "channel": "agent"},
            },
            "provenance": {
                "model": "bench-model-1",
                "prompt_hash": "sha256:5d41402abc4b2a76b9719d911017c592",
                "tool_schema_version": "2024-11",
            },
            "claim": True,
            "owner": owner,
            "claim_id": f"claim-{step}",
            "lease_seconds": 60,
        }
    ).encode()


def outcome_body(lease_token: str) -> bytes:
    ref = f"ch_{secrets.token_hex(8)}"
    return json.dumps(
        {
            "lease_token": lease_token,
            "status": "confirmed",
            "provider_ref": ref,
            "response": {
                "id": ref,
                "status": "succeeded",
                "amount": 49.95,
                "currency": "EUR",
                "card_last4": "4242",
            },
        }
    ).encode()


def _check_intent(status: int, data: dict[str, Any]) -> tuple[str, str]:
    if status != 201 or data.get("status") != "dispatching" or not data.get("lease_token"):
        raise LifecycleError(f"POST /effects → {status} {json.dumps(data, default=str)[:300]}")
    return str(data["id"]), str(data["lease_token"])


def _check_outcome(status: int, data: dict[str, Any]) -> None:
    if status != 200 or data.get("status") != "confirmed":
        raise LifecycleError(f"POST /outcome → {status} {json.dumps(data, default=str)[:300]}")


class HttpSession:
    """One client: a keep-alive connection (stdlib http.client: the lightest client).

    It is replaced every `reconnect_every` lifecycles, as client pools recycle connections:
    gunicorn's workers keep the connections they happened to accept, and 8 connections pinned
    for the whole run can sit 7:1 on two workers; a fresh connection goes to a worker that is
    waiting in accept, which evens the load out.
    """

    def __init__(self, base_url: str, key: str, client: int, reconnect_every: int = 0) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        self.reconnect_every = reconnect_every
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.run_id = f"bench-{client}-{uuid.uuid4().hex[:8]}"
        self.owner = f"worker-{client}"

    def _post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            self.conn.request("POST", path, body, self.headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            raise LifecycleError(f"POST {path}: {type(exc).__name__}: {exc}") from exc
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, {"body": raw[:300].decode(errors="replace")}

    def lifecycle(self, step: int) -> None:
        if self.reconnect_every and step % self.reconnect_every == 0:
            self.conn.close()  # http.client connects again on the next request
        effect_id, token = _check_intent(
            *self._post("/api/v1/effects", intent_body(self.run_id, step, self.owner))
        )
        _check_outcome(*self._post(f"/api/v1/effects/{effect_id}/outcome", outcome_body(token)))

    def close(self) -> None:
        self.conn.close()


class DirectSession:
    """Baseline B: the bare statements on a psycopg connection of its own, no HTTP."""

    def __init__(self, url: str, key: str, client: int) -> None:
        from bench.baseline_wsgi import BareLedger

        self.ledger = BareLedger(url)
        self.authorization = f"Bearer {key}"
        self.run_id = f"direct-{client}-{uuid.uuid4().hex[:8]}"
        self.owner = f"worker-{client}"

    def lifecycle(self, step: int) -> None:
        status, data = self.ledger.post_effect(
            self.authorization, intent_body(self.run_id, step, self.owner)
        )
        effect_id, token = _check_intent(status, data)
        _check_outcome(
            *self.ledger.post_outcome(self.authorization, effect_id, outcome_body(token))
        )

    def close(self) -> None:
        self.ledger.close()


# --- Load generation -------------------------------------------------------------------------


@dataclass
class Window:
    start: float  # clients start (warm-up), time.monotonic(), the same clock in every process
    measure: float  # measurement starts
    end: float  # measurement ends

    @classmethod
    def after(cls, delay: float, opts: Options) -> Window:
        start = time.monotonic() + delay
        return cls(start, start + opts.warmup, start + opts.warmup + opts.duration)


@dataclass
class ClientReport:
    completed: int = 0  # lifecycles that began and finished inside the measurement window
    latencies: list[float] = field(default_factory=list)  # seconds, of those
    errors: int = 0  # failed lifecycles, warm-up included
    error_samples: list[str] = field(default_factory=list)


@dataclass
class ProcessReport:
    clients: list[ClientReport]
    cpu_seconds: float  # this process's CPU time in the measurement window


def run_client(make: Callable[[int], Session], client: int, window: Window) -> ClientReport:
    report = ClientReport()
    try:
        session = make(client)
    except Exception as exc:  # a client that cannot start is an error, not a crash
        report.errors += 1
        report.error_samples.append(f"client {client} did not start: {exc}")
        return report
    try:
        time.sleep(max(0.0, window.start - time.monotonic()))
        step = 0
        consecutive_errors = 0
        while True:
            began = time.monotonic()
            if began >= window.end:
                break
            step += 1
            try:
                session.lifecycle(step)
            except Exception as exc:
                report.errors += 1
                consecutive_errors += 1
                if len(report.error_samples) < MAX_ERROR_SAMPLES:
                    report.error_samples.append(f"{type(exc).__name__}: {exc}")
                if consecutive_errors >= 20:
                    report.error_samples.append("client gave up after 20 errors in a row")
                    break
                continue
            consecutive_errors = 0
            finished = time.monotonic()
            if began >= window.measure and finished <= window.end:
                report.completed += 1
                report.latencies.append(finished - began)
    finally:
        session.close()
    return report


def run_process(
    make: Callable[[int], Session], clients: list[int], window: Window
) -> ProcessReport:
    """Run `clients` as threads of this process; also measure this process's CPU time."""
    reports: list[ClientReport] = [ClientReport() for _ in clients]

    def one(index: int, client: int) -> None:
        reports[index] = run_client(make, client, window)

    threads = [
        threading.Thread(target=one, args=(i, c), daemon=True) for i, c in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, window.measure - time.monotonic()))
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(max(0.0, window.end - time.monotonic()))
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    for thread in threads:
        thread.join()
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    return ProcessReport(reports, cpu)


def _child(make: Callable[[int], Session], clients: list[int], window: Window, queue: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    queue.put(run_process(make, clients, window))


@dataclass
class Measurement:
    """One round of one contender."""

    reports: list[ProcessReport]
    seconds: float
    cpu: dict[str, float]


def run_load(make: Callable[[int], Session], opts: Options, server: Server | None) -> Measurement:
    """`opts.clients` clients in `opts.client_processes` forked processes, threads in each."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    window = Window.after(0.5, opts)
    spread = opts.client_processes
    groups = [list(range(i, opts.clients, spread)) for i in range(spread)]
    processes = [
        context.Process(target=_child, args=(make, group, window, queue), daemon=True)
        for group in groups
    ]
    reports: list[ProcessReport] = []
    try:
        for process in processes:
            process.start()
        cpu = _sample_window(
            window.measure,
            window.end,
            load_pids={p.pid for p in processes if p.pid is not None},
            server_pgid=server.proc.pid if server else None,
        )
        for _ in processes:
            reports.append(queue.get(timeout=120))
        for process in processes:
            process.join(10)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(5)
    return Measurement(reports, opts.duration, cpu)


def _sample_window(
    measure: float, end: float, *, load_pids: set[int], server_pgid: int | None
) -> dict[str, float]:
    time.sleep(max(0.0, measure - time.monotonic()))
    before = cpu_sample()
    time.sleep(max(0.0, end - time.monotonic()))
    after = cpu_sample()
    return cpu_split(before, after, load_pids=load_pids, server_pgid=server_pgid)


@dataclass
class Result:
    name: str
    unit: str  # what `rate` counts per second
    rate: float | None
    p50_ms: float | None
    p99_ms: float | None
    completed: int
    errors: int
    error_samples: list[str]
    ratio: float | None = None  # ledger ÷ this (for baselines)
    goal: float | None = None
    note: str = ""
    # Share of all cores per party in the measurement windows (/proc), and CPU milliseconds
    # per lifecycle (DBOS: per 2-step workflow): steadier than rates on a busy machine.
    cpu_percent: dict[str, float] = field(default_factory=dict)
    cpu_ms_per_lifecycle: dict[str, float] = field(default_factory=dict)
    load_cpu_percent_of_core: float | None = None
    rounds: list[float] = field(default_factory=list)  # the rate of each round

    @property
    def met(self) -> bool | None:
        if self.goal is None or self.ratio is None:
            return None
        return self.ratio >= self.goal


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def summarise(
    name: str,
    unit: str,
    measurements: list[Measurement],
    *,
    per_lifecycle: int = 1,
    note: str = "",
) -> Result:
    """All rounds of one contender as one result. `per_lifecycle` units make one lifecycle
    (DBOS: 2 steps per workflow); latencies are per lifecycle."""
    clients = [c for m in measurements for r in m.reports for c in r.clients]
    latencies = sorted(x for c in clients for x in c.latencies)
    seconds = sum(m.seconds for m in measurements)
    completed = per_lifecycle * sum(c.completed for c in clients)
    cpu_seconds: dict[str, float] = {}
    for m in measurements:
        for key, value in m.cpu.items():
            cpu_seconds[key] = cpu_seconds.get(key, 0.0) + value
    capacity = sum(cpu_seconds.values())
    lifecycles = completed / per_lifecycle
    load_cpu = sum(r.cpu_seconds for m in measurements for r in m.reports)
    return Result(
        name=name,
        unit=unit,
        rate=completed / seconds if seconds else None,
        p50_ms=1000 * statistics.median(latencies) if latencies else None,
        p99_ms=1000 * percentile(latencies, 0.99) if latencies else None,
        completed=completed,
        errors=sum(c.errors for c in clients),
        error_samples=[s for c in clients for s in c.error_samples][:MAX_ERROR_SAMPLES],
        note=note,
        cpu_percent={k: round(100 * v / capacity, 1) for k, v in cpu_seconds.items()}
        if capacity
        else {},
        cpu_ms_per_lifecycle={
            k: round(1000 * cpu_seconds[k] / lifecycles, 2)
            for k in ("server", "postgres", "load generator")
            if k in cpu_seconds
        }
        if lifecycles
        else {},
        load_cpu_percent_of_core=round(100 * load_cpu / seconds, 1) if seconds else None,
        rounds=[
            round(
                per_lifecycle * sum(c.completed for r in m.reports for c in r.clients) / m.seconds,
                1,
            )
            for m in measurements
        ],
    )


# --- Contenders ------------------------------------------------------------------------------


class Contender(Protocol):
    name: str

    def measure(self) -> Measurement: ...


@dataclass
class LoadContender:
    name: str
    make: Callable[[int], Session]
    opts: Options
    server: Server | None

    def measure(self) -> Measurement:
        return run_load(self.make, self.opts, self.server)


class DbosUnavailable(Exception):
    pass


class DbosWorker:
    """One `--dbos-worker` child process: DBOS launched once, one round per `ROUND` line."""

    def __init__(self, url: str, executor: str, clients: int, opts: Options) -> None:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--dbos-worker",
            url,
            "--dbos-executor",
            executor,
            "--clients",
            str(clients),
        ]
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def line(self, prefix: str, timeout: float) -> str:
        """The next stdout line starting with `prefix` (DBOS may print other lines)."""
        assert self.proc.stdout is not None
        timer = threading.Timer(timeout, lambda: stop_group(self.proc, grace=1))
        timer.start()
        try:
            for line in self.proc.stdout:
                if line.startswith(prefix):
                    return line.removeprefix(prefix).strip()
        finally:
            timer.cancel()
        self.proc.wait(5)
        tail = "".join(self.stderr[-12:]).strip() or f"exit status {self.proc.returncode}"
        raise DbosUnavailable(f"the DBOS worker stopped: {tail}")

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise DbosUnavailable(f"the DBOS worker is gone: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # the worker's cue to shut DBOS down
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(15)
        stop_group(self.proc, grace=2)


class DbosContender:
    """DBOS workflows of 2 steps in one process per core (each a DBOS executor of its own,
    sharing one system database), the clients spread over them like baseline B's.

    The processes live for the whole benchmark, so DBOS launches once and its rounds
    interleave with the other contenders'. Between rounds they are idle.
    """

    def __init__(self, base_url: str, opts: Options, processes: int) -> None:
        try:
            import dbos  # noqa: F401
        except ImportError as exc:
            raise DbosUnavailable(f"dbos does not import ({exc})") from None
        self.version = _dist_version("dbos")
        self.processes = processes
        self.name = f"C: DBOS {self.version}, {opts.clients} workflows × 2 steps"
        self.opts = opts
        self.base_url = base_url
        self.db_name = bench_database(base_url, "dbos")
        recreate_database(base_url, self.db_name)
        OWN_DATABASES.add(self.db_name)
        url = database_url(base_url, self.db_name)
        self.workers: list[DbosWorker] = []
        # The first worker creates DBOS's schema alone; the others start once it is ready.
        spread = [len(range(i, opts.clients, processes)) for i in range(processes)]
        self.workers.append(DbosWorker(url, "bench-0", spread[0], opts))
        self._pending = [(url, f"bench-{i}", n) for i, n in enumerate(spread) if i]

    def wait_ready(self) -> None:
        self.workers[0].line("BENCH-READY", timeout=120)
        for url, executor, clients in self._pending:
            self.workers.append(DbosWorker(url, executor, clients, self.opts))
        for worker in self.workers[1:]:
            worker.line("BENCH-READY", timeout=120)

    def measure(self) -> Measurement:
        window = Window.after(0.3, self.opts)
        for worker in self.workers:
            worker.send(f"ROUND {window.start} {window.measure} {window.end}")
        cpu = _sample_window(
            window.measure,
            window.end,
            load_pids={w.proc.pid for w in self.workers},
            server_pgid=None,
        )
        reports = []
        for worker in self.workers:
            raw = json.loads(worker.line("BENCH-RESULT ", timeout=120))
            reports.append(
                ProcessReport([ClientReport(**c) for c in raw["clients"]], raw["cpu_seconds"])
            )
        return Measurement(reports, self.opts.duration, cpu)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        if not self.opts.keep_db:
            with contextlib.suppress(Exception):
                drop_database(self.base_url, self.db_name)


def dbos_worker(system_db_url: str, executor: str, clients: int) -> int:
    """Child process: on each `ROUND start measure end` line, `clients` concurrent DBOS
    workflows of 2 steps each, back to back; reports like the other contenders."""
    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {
        "name": "effect-ledger-bench",
        "system_database_url": system_db_url,
        "executor_id": executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    def record_intent(run_id: str, step: int) -> dict[str, Any]:
        return {
            "effect_key": f"{run_id}:step-{step}",
            "status": "dispatching",
            "lease_token": secrets.token_urlsafe(24),
            "request": {"amount": "49.95", "currency": "EUR", "card": "[card:redacted]"},
        }

    @DBOS.step()
    def record_outcome(intent: dict[str, Any]) -> dict[str, Any]:
        ref = f"ch_{secrets.token_hex(8)}"
        return {"status": "confirmed", "provider_ref": ref, "response": {"id": ref}}

    @DBOS.workflow()
    def lifecycle(run_id: str, step: int) -> dict[str, Any]:
        return record_outcome(record_intent(run_id, step))

    class WorkflowSession:
        def __init__(self, client: int) -> None:
            self.run_id = f"dbos-{executor}-{client}-{uuid.uuid4().hex[:8]}"

        def lifecycle(self, step: int) -> None:
            if lifecycle(self.run_id, step).get("status") != "confirmed":
                raise LifecycleError("workflow did not return its outcome")

        def close(self) -> None:
            pass

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    DBOS.launch()
    try:
        print("BENCH-READY", flush=True)
        for command in sys.stdin:
            word, *times = command.split()
            if word != "ROUND":
                break
            window = Window(*(float(t) for t in times))
            report = run_process(WorkflowSession, list(range(clients)), window)
            print("BENCH-RESULT " + json.dumps(asdict(report)), flush=True)
    finally:
        DBOS.destroy()
    return 0


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _skipped(reason: str) -> Result:
    print(f"DBOS baseline skipped: {reason}", flush=True)
    return Result(
        name="C: DBOS step checkpoints",
        unit="steps",
        rate=None,
        p50_ms=None,
        p99_ms=None,
        completed=0,
        errors=0,
        error_samples=[],
        goal=DBOS_GOAL,
        note=f"skipped: {reason}",
    )


# --- Report ----------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def print_table(results: list[Result]) -> None:
    header = ["name", "per second", "p50 ms", "p99 ms", "ratio", "goal", "met?"]
    rows: list[list[str]] = []
    for r in results:
        met = {None: "–", True: "yes", False: "NO"}[r.met]
        rows.append(
            [
                r.name,
                "skipped" if r.rate is None else f"{r.rate:,.1f} {r.unit}",
                _fmt(r.p50_ms),
                _fmt(r.p99_ms),
                _fmt(r.ratio, 2),
                "–" if r.goal is None else f"≥ {r.goal:g}",
                met if r.goal is not None else ("report" if r.ratio is not None else "–"),
            ]
        )
    print_grid(header, rows, right_align=True)


def print_cpu_table(results: list[Result]) -> None:
    """CPU milliseconds per lifecycle by party: steadier than rates on a shared machine."""
    measured = [r for r in results if r.cpu_ms_per_lifecycle]
    if not measured:
        return
    print(
        "\nCPU ms per lifecycle (DBOS: per 2-step workflow), from /proc; other work's share "
        "of the machine in brackets:"
    )
    width = max(len(r.name) for r in measured)
    print(f"  {'name'.ljust(width)}  server  postgres  load gen   total")
    for r in measured:
        ms = r.cpu_ms_per_lifecycle
        total = sum(ms.values())
        print(
            f"  {r.name.ljust(width)}  {ms.get('server', 0):6.2f}  {ms.get('postgres', 0):8.2f}"
            f"  {ms.get('load generator', 0):8.2f}  {total:6.2f}"
            f"   ({r.cpu_percent.get('other', 0):g}% other)"
        )
    ledger, bare = results[0], results[1]
    if ledger.cpu_ms_per_lifecycle and bare.cpu_ms_per_lifecycle:

        def serving(r: Result) -> float:
            return r.cpu_ms_per_lifecycle.get("server", 0) + r.cpu_ms_per_lifecycle.get(
                "postgres", 0
            )

        if serving(ledger):
            print(
                f"  By CPU cost (server + PostgreSQL), ledger ÷ A = "
                f"{serving(bare) / serving(ledger):.2f}."
            )


def print_round(name: str, unit: str, m: Measurement, per_lifecycle: int = 1) -> None:
    result = summarise(name, unit, [m], per_lifecycle=per_lifecycle)
    print(
        f"  {name}: {_fmt(result.rate)} {unit}/s, p50 {_fmt(result.p50_ms)} ms, "
        f"p99 {_fmt(result.p99_ms)} ms, {result.errors} errors",
        flush=True,
    )
    if result.cpu_percent:
        split = ", ".join(f"{k} {v:g}%" for k, v in result.cpu_percent.items())
        per = ", ".join(f"{k} {v:g}" for k, v in result.cpu_ms_per_lifecycle.items() if v)
        print(f"    CPU of all cores: {split}; CPU ms per lifecycle: {per}", flush=True)
    for sample in result.error_samples:
        print(f"    error: {sample}", flush=True)


def machine_note() -> str:
    cores = os.cpu_count() or 0
    return (
        f"{cores} cores; load generator, server and PostgreSQL share them, so every "
        f"figure is bounded by {cores} cores of CPU"
    )


def busy_warning(results: list[Result]) -> str | None:
    busiest = max((r.cpu_percent.get("other", 0.0) for r in results), default=0.0)
    if busiest < 10:
        return None
    return (
        f"Warning: other processes used up to {busiest:g}% of the machine's CPU during the "
        "measurements; absolute rates are depressed (the interleaved rounds keep ratios fairer)."
    )


def write_json(
    results: list[Result], opts: Options, server_label: str, writes: dict[str, Any]
) -> None:
    RESULT_FILE.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "note": machine_note(),
        },
        "config": {
            "clients": opts.clients,
            "rounds": opts.rounds,
            "warmup_s": opts.warmup,
            "duration_s_per_round": opts.duration,
            "server": server_label,
            "client": f"stdlib http.client, keep-alive, one connection per client thread, "
            f"{opts.client_processes} process(es)",
        },
        "results": [{**asdict(r), "met": r.met} for r in results],
        "rows_written": writes,
    }
    RESULT_FILE.write_text(json.dumps(data, indent=2) + "\n")


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
        stack.callback(_drop_quietly, base_url, bench_database(base_url, BENCH_DB), opts)
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
    print(f"Written to {RESULT_FILE.relative_to(ROOT)}.")
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
        results.append(_skipped(dbos_skip or "not run"))
    return results


WRITES_SQL = """
    SELECT a.name, count(*) AS effects,
           count(*) FILTER (WHERE e.status = 'confirmed') AS confirmed,
           sum((SELECT count(*) FROM ledger_effectevent v WHERE v.effect_id = e.id)) AS events,
           (SELECT count(*) FROM ledger_run r WHERE r.agent_id = a.id) AS runs
      FROM ledger_agent a JOIN ledger_effect e ON e.agent_id = a.id
     GROUP BY a.id, a.name ORDER BY a.name
"""


def writes_check(url: str) -> dict[str, dict[str, float]]:
    """Rows each agent left: the ledger's and the baselines' writes must match per lifecycle."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(WRITES_SQL).fetchall()
    return {
        name: {
            "effects": int(effects),
            "confirmed": int(confirmed),
            "runs": int(runs),
            "events_per_effect": round(int(events) / effects, 3) if effects else 0.0,
        }
        for name, effects, confirmed, events, runs in rows
    }


def print_writes(writes: dict[str, dict[str, float]]) -> None:
    print("\nRows written (agent 'bench': the ledger; 'bench-baseline': A and B):")
    for name, w in writes.items():
        print(
            f"  {name}: {w['effects']:.0f} effects ({w['confirmed']:.0f} confirmed), "
            f"{w['events_per_effect']:g} events per effect, {w['runs']:.0f} runs"
        )
    per_effect = {w["events_per_effect"] for w in writes.values()}
    if len(per_effect) > 1:
        print(
            "  Warning: the ledger and the baseline did not write the same events per "
            "lifecycle: the baseline's SQL needs updating (bench/baseline_wsgi.py)."
        )


def _ratio(ledger: float | None, baseline: float | None) -> float | None:
    if not ledger or not baseline:
        return None
    return ledger / baseline


def _drop_quietly(base_url: str, name: str, opts: Options) -> None:
    if not opts.keep_db:
        with contextlib.suppress(Exception):
            drop_database(base_url, name)


# --- Profile ---------------------------------------------------------------------------------

# Phases of a request, outermost first: (label, object, attribute). Each is timed by a wrapper
# (a clock read at entry and exit: negligible next to a request); a phase's own time excludes
# the phases nested in it, so the rows add up to the whole.
DJANGO = "Django: WSGI handler, middleware, URL routing"
NINJA = "ninja dispatch + view glue (atomic(), COMMIT, Intent)"
PHASES: list[tuple[str, str, str]] = [
    (NINJA, "ninja.operation:Operation", "run"),
    (
        "auth: API-key lookup (+ Django's health-check SELECT 1)",
        "ninja.operation:Operation",
        "_run_checks",
    ),
    ("input: JSON parse, checks, pydantic", "ninja.operation:Operation", "_get_values"),
    ("view: tool policy lookup (policy_for)", "ledger.api", "policy_for"),
    ("view: record_intent (key lookup, seq, insert, event)", "ledger.api", "record_intent"),
    ("view: claim (dependency check, update, event)", "ledger.api", "claim"),
    ("view: effect lookup (_own_effect)", "ledger.api", "_own_effect"),
    ("view: record_outcome (update, event)", "ledger.api", "record_outcome"),
    ("view: response dict + upstreams query (_show)", "ledger.api", "_show"),
    (
        "output: pydantic response model + JSON render",
        "ninja.operation:Operation",
        "_result_to_response",
    ),
]
# Nested work worth its own row wherever it happens (redaction inside record_intent, …).
DETAILS: list[tuple[str, str, str]] = [
    ("  redaction (Redactor)", "ledger.redaction:Redactor", "__call__"),
    ("  redaction (Redactor.text)", "ledger.redaction:Redactor", "text"),
    ("  HMACs: request hash", "ledger.digests", "request_hash"),
    ("  HMACs: value digest", "ledger.digests", "value_digest"),
    ("  event digest (content_digest)", "ledger.digests", "content_digest"),
]


class PhaseClock:
    """Exclusive wall time per phase, and the time each phase waited for PostgreSQL."""

    def __init__(self) -> None:
        self.own: dict[str, float] = {}
        self.db: dict[str, float] = {}
        self.round_trips = 0
        self.stack: list[str] = []

    def _add(self, table: dict[str, float], label: str, seconds: float) -> None:
        table[label] = table.get(label, 0.0) + seconds

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            parent = clock.stack[-1] if clock.stack else None
            clock.stack.append(label)
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - began
                clock.stack.pop()
                clock._add(clock.own, label, elapsed)
                if parent is not None:
                    clock._add(clock.own, parent, -elapsed)

        return timed

    def wrap_wait(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.round_trips += 1
                clock._add(
                    clock.db,
                    clock.stack[-1] if clock.stack else DJANGO,
                    time.perf_counter() - began,
                )

        return timed


@contextlib.contextmanager
def patched(clock: PhaseClock) -> Iterator[None]:
    """Wrap the phase functions (and psycopg's round trips) for the duration."""
    import importlib

    import psycopg

    undo: list[tuple[Any, str, Any]] = []

    def patch(target: Any, attribute: str, replacement: Any) -> None:
        undo.append((target, attribute, target.__dict__[attribute]))
        setattr(target, attribute, replacement)

    try:
        for label, where, attribute in PHASES + DETAILS:
            module, _, cls = where.partition(":")
            target = importlib.import_module(module)
            if cls:
                target = getattr(target, cls)
            patch(target, attribute, clock.wrap(label, getattr(target, attribute)))
        patch(psycopg.Connection, "wait", clock.wrap_wait(psycopg.Connection.wait))
        yield
    finally:
        for target, attribute, original in reversed(undo):
            setattr(target, attribute, original)


# Layers of exclusive (self) time under cProfile, by where the code lives. First match wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("PostgreSQL round trips (psycopg: send, wait, parse)", ("/psycopg/", "psycopg")),
    ("Django DB backend (cursor wrappers, adaptation)", ("django/db/backends/", "django/db/utils")),
    ("Django ORM (query building, model instances)", ("django/db/",)),
    ("pydantic (validation, serialization)", ("pydantic",)),
    ("django-ninja (dispatch, auth, parsing glue)", ("/ninja/",)),
    ("redaction (ledger/redaction.py incl. regex)", ("ledger/redaction.py",)),
    ("HMACs and digests", ("ledger/digests.py", "hmac.py", "_hashlib", "hashlib", "_sha2")),
    ("JSON encode/decode (jsonenc, json)", ("ledger/jsonenc.py", "/json/", "_json", "unicodedata")),
    ("ledger logic (other)", ("ledger/",)),
    (
        "Django request handling + middleware",
        ("/django/", "/axes/", "/csp/", "/whitenoise/", "django_htmx", "/asgiref/"),
    ),
]
OTHER_LAYER = "other (stdlib: uuid, datetime, re, threading …)"


def _layer_of(filename: str, funcname: str) -> str | None:
    text = filename if filename != "~" else funcname
    for label, needles in LAYERS:
        if any(n in text for n in needles):
            return label
    return None if filename == "~" else OTHER_LAYER


def _func_label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    for marker in ("site-packages/", str(ROOT) + "/", "/lib/python"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    return f"{filename}:{line}({name})"


class WsgiCaller:
    """Calls the ledger's WSGI application directly, as gunicorn would, minus the socket."""

    def __init__(self, app: Callable[..., Any], key: str) -> None:
        self.app = app
        self.authorization = f"Bearer {key}"
        self.run_id = f"profile-{uuid.uuid4().hex[:8]}"

    def serve(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "HTTP_HOST": "127.0.0.1:8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "SCRIPT_NAME": "",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_AUTHORIZATION": self.authorization,
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        status: list[str] = []
        result = self.app(environ, lambda s, headers, exc_info=None: status.append(s))
        try:
            raw = b"".join(result)
        finally:
            result.close()  # request_finished: Django's connection housekeeping, as in gunicorn
        return int(status[0].split()[0]), json.loads(raw)

    def lifecycle(self, step: int) -> None:
        effect_id, token = _check_intent(
            *self.serve("/api/v1/effects", intent_body(self.run_id, step, "profiler"))
        )
        _check_outcome(*self.serve(f"/api/v1/effects/{effect_id}/outcome", outcome_body(token)))


def profile(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL is not set.")
    try:
        db = prepare_database(base_url)
        os.environ.update(
            DATABASE_URL=db.url,
            DJANGO_SETTINGS_MODULE="config.settings",
            DJANGO_DEBUG="false",
            LOG_LEVEL="WARNING",
        )
        from config.wsgi import application

        caller = WsgiCaller(application, db.ledger_key)
        n = opts.profile_lifecycles
        step = 0

        def run(count: int) -> tuple[float, float]:
            nonlocal step
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(count):
                step += 1
                caller.lifecycle(step)
            return time.perf_counter() - wall, time.process_time() - cpu

        run(50)  # warm up: imports, connection, caches
        wall, cpu = run(n)
        print(
            f"Profile of the ledger's hot path: {n} lifecycles (POST /effects with claim + "
            "POST /outcome) in-process, the WSGI application called directly on one thread, "
            "PostgreSQL on this machine."
        )
        print(
            f"\nPlain run: {1000 * wall / n:.2f} ms per lifecycle ({n / wall:.0f}/s on one "
            f"thread), of which {1000 * cpu / n:.2f} ms CPU in this process."
        )

        # 1. Phases, timed by wrappers: no profiler distortion.
        clock = PhaseClock()
        caller.serve = clock.wrap(DJANGO, caller.serve)  # type: ignore[method-assign]
        with patched(clock):
            wall, _ = run(n)
        caller.serve = WsgiCaller.serve.__get__(caller)  # type: ignore[method-assign]
        print_phases(clock, wall, n)

        # 2. Layers and functions, under cProfile (which inflates Python time against I/O).
        profiler = cProfile.Profile()
        profiler.enable()
        run(n)
        profiler.disable()
        raw: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        total = sum(v[2] for v in raw.values())
        print(
            f"\nUnder cProfile ({1000 * total / n:.2f} ms per lifecycle: the profiler's own "
            "cost lands on Python code, so Python shares come out high):"
        )
        print_layers(raw, total, n)
        print_top(raw, n, by="cumulative")
        print_top(raw, n, by="self", limit=15)
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        _drop_quietly(base_url, bench_database(base_url, BENCH_DB), opts)
    return 0


def print_phases(clock: PhaseClock, wall: float, n: int) -> None:
    print(
        f"\nBy phase (wall time per lifecycle = 2 requests; {clock.round_trips / n:.0f} psycopg "
        "waits per lifecycle, each attributed to the phase that made it; the Python column is "
        "the rest, and it does not depend on how busy PostgreSQL is):"
    )
    print("      %   wall ms   PostgreSQL ms   Python ms   phase")
    total = sum(clock.own.values())
    labels = [DJANGO] + [label for label, _, _ in PHASES]
    details = [label for label, _, _ in DETAILS]
    for label in labels + details:
        own = clock.own.get(label, 0.0)
        if label in details and not own:
            continue
        db = clock.db.get(label, 0.0)
        print(
            f"  {100 * own / total:5.1f}%  {1000 * own / n:8.2f}  {1000 * db / n:14.2f}  "
            f"{1000 * (own - db) / n:10.2f}   {label}"
        )
    waits = sum(clock.db.values())
    print(
        f"  {100.0:5.1f}%  {1000 * total / n:8.2f}  {1000 * waits / n:14.2f}  "
        f"{1000 * (total - waits) / n:10.2f}   total: {100 * waits / total:.0f}% waiting for "
        f"PostgreSQL, {100 * (1 - waits / total):.0f}% Python"
    )
    if abs(total - wall) > 0.05 * wall:
        print(f"  (the timed phases cover {100 * total / wall:.0f}% of the run's wall time)")


def print_layers(raw: dict[Any, Any], total: float, n: int) -> None:
    print("\nBy layer (exclusive time; C calls counted with their Python caller):")
    layers: dict[str, float] = {}
    for key, (_, _, self_time, _, callers) in raw.items():
        layer = _layer_of(key[0], key[2])
        if layer is not None:
            layers[layer] = layers.get(layer, 0.0) + self_time
            continue
        # A builtin with no telling name: its time belongs to whoever called it.
        for caller, edge in callers.items():
            caller_layer = _layer_of(caller[0], caller[2]) or OTHER_LAYER
            layers[caller_layer] = layers.get(caller_layer, 0.0) + edge[2]
    for label, seconds in sorted(layers.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * seconds / total:5.1f}%  {1000 * seconds / n:6.2f} ms  {label}")


def print_top(raw: dict[Any, Any], n: int, *, by: str = "cumulative", limit: int = 25) -> None:
    print(f"\nTop {limit} functions by {by} time (per lifecycle):")
    print("   cum ms   self ms   calls  function")
    column = 3 if by == "cumulative" else 2
    ranked = sorted(raw.items(), key=lambda kv: -kv[1][column])
    shown = 0
    for key, (_, calls, self_time, cumulative, _) in ranked:
        label = _func_label(key)
        if "lifecycle.py" in label or "_lsprof" in label:
            continue
        print(
            f"  {1000 * cumulative / n:7.2f}  {1000 * self_time / n:8.3f}  {calls / n:6.1f}  "
            f"{label}"
        )
        shown += 1
        if shown >= limit:
            break


# --- Entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    opts, args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dbos_worker:
        return dbos_worker(args.dbos_worker, args.dbos_executor, opts.clients)
    return run_stoppable(lambda: profile(opts) if opts.profile else benchmark(opts))


if __name__ == "__main__":
    sys.exit(main())
