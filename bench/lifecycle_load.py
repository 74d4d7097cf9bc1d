"""How the lifecycle benchmark loads a server: its options and database, the gunicorn it
starts, clients running lifecycles back to back in a timed window, the CPU each party spent
meanwhile, and the rounds of one contender summed up into one result."""

from __future__ import annotations

import contextlib
import http.client
import multiprocessing
import resource
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from bench.cpu import CpuWindow
from bench.harness import ROOT, bench_database, fresh_bench_database, stop_group
from bench.lifecycle_clients import Session
from bench.report import percentile
from devstack.embedded import free_port
from devstack.web import gunicorn_argv

MAX_ERROR_SAMPLES = 5
BENCH_DB = "bench"  # the benchmark database: <DATABASE_URL's database>_bench


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
    env, (ledger_key, baseline_key) = fresh_bench_database(
        base_url, name, ["bench", "bench-baseline"]
    )
    return BenchDatabase(
        url=env["DATABASE_URL"], env=env, ledger_key=ledger_key, baseline_key=baseline_key
    )


# --- Processes we start ----------------------------------------------------------------------


@dataclass
class Server:
    base_url: str
    proc: subprocess.Popen[Any]
    label: str


@contextlib.contextmanager
def gunicorn(app: str, env: dict[str, str], opts: Options) -> Iterator[Server]:
    port = free_port()
    cmd = gunicorn_argv(
        app,
        f"127.0.0.1:{port}",
        workers=opts.workers,
        threads=opts.threads,
        options=[
            "--chdir", str(ROOT),
            "--log-level", "warning",
            "--graceful-timeout", "5",
            "--keep-alive", "5",
        ],
    )  # fmt: skip
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


# The databases this run created: PostgreSQL backends serving them count as "postgres";
# backends of other databases (other people's test runs on a shared server) as "other".
OWN_DATABASES: set[str] = set()


def _is_ours(title: str) -> bool:
    """A PostgreSQL process of this run: a backend of one of our databases, or one of the
    server's own processes (WAL writer, checkpointer …), which do our commits' work too."""
    words = title.split()
    if len(words) < 5 or not any("(" in w or w == "[local]" for w in words):
        return True  # not a client backend: an auxiliary process
    return any(db in words for db in OWN_DATABASES)


def _sample_window(
    measure: float, end: float, *, load_pids: set[int], server_pgid: int | None
) -> dict[str, float]:
    """CPU seconds of each party from `measure` to `end` (time.monotonic())."""
    window = CpuWindow(
        {
            "load generator": lambda p: p.pid in load_pids,
            "server": lambda p: server_pgid is not None and p.pgrp == server_pgid,
            "postgres": lambda p: p.title.startswith("postgres") and _is_ours(p.title),
        }
    )
    time.sleep(max(0.0, measure - time.monotonic()))
    window.start()
    time.sleep(max(0.0, end - time.monotonic()))
    window.stop()
    return window.seconds


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


# --- Results ---------------------------------------------------------------------------------


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
