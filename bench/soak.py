"""A soak: the ledger under a fixed offered load for a long time, the last minutes against the
first. Does what an agent's call costs grow with its history, or the workers' memory with time?

The web is started as `make run` starts it (`devstack.web.web_services`, GUNICORN_WORKERS ×
GUNICORN_THREADS, LOG_LEVEL INFO, a token for /metrics), on a fresh database
`<DATABASE_URL's database>_soak` with `--agents` agents, each keeping a few planned effects
nobody claims (`bench.soak_load`). First its capacity is measured, briefly: lifecycles per
second from `--clients` threads back to back. Then `--fraction` of it is offered at a fixed rate
for `--minutes` (20 by default), every agent's history growing with each lifecycle, every 50th
ticket of an agent a `POST /recovery`, and /metrics scraped every 15 s. The web alone is
started (no rq worker, no django-q2 cluster): every effect is confirmed by its agent.

The table compares the last window with the first (a window is 5 minutes, or a third of a
shorter run): lifecycles per second (target ≥ 0.97 ×), p99 of every agent endpoint (target
≤ 1.2 ×), /metrics' p99 (reported), errors, and the gunicorn workers' resident memory at the end
of the first window (after warm-up) and at the end. Exit status 0 also when a target is missed
(this is a measurement), 1 when calls failed or the server would not start. The table is
printed and written to `var/bench/soak.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    ROOT,
    bench_database,
    code_version,
    drop_quietly,
    fresh_bench_database,
    run_stoppable,
    stop_group,
)
from bench.lifecycle_load import OWN_DATABASES, Server, wait_healthy
from bench.soak_load import (
    INTENT,
    METRICS,
    OUTCOME,
    RECOVERY,
    Calls,
    Offered,
    closed_loop,
    open_loop,
    scrape_every,
    seed_unfinished,
)
from devstack.embedded import free_port
from devstack.web import web_services

TOKEN = "soak-metrics-token-0123456789abcdef"
SCRAPE_SECONDS = 15.0
WINDOW_MINUTES = 5.0
THROUGHPUT_TARGET, P99_TARGET = 0.97, 1.2


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="the offered load's (20)")
    parser.add_argument("--fraction", type=float, default=0.7, help="of capacity offered (0.7)")
    parser.add_argument("--agents", type=int, default=8, help="agents (8)")
    parser.add_argument("--clients", type=int, default=16, help="threads measuring capacity (16)")
    parser.add_argument("--capacity-seconds", type=float, default=20.0, help="(20)")
    parser.add_argument("--threads", type=int, default=32, help="threads offering load (32)")
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark database")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or not 0 < args.fraction <= 1 or args.agents < 1:
        parser.error("--minutes > 0, 0 < --fraction ≤ 1, --agents ≥ 1")
    return args


@contextlib.contextmanager
def web(env: dict[str, str], scratch: Path) -> Iterator[Server]:
    """The web as `make run` starts it, its output in `scratch`/web.log."""
    workers = os.environ.get("GUNICORN_WORKERS", "2")
    threads = os.environ.get("GUNICORN_THREADS", "4")
    port = free_port()
    services = web_services(
        "127.0.0.1",
        port,
        workers=workers,
        threads=threads,
        options=["--chdir", str(ROOT)],
        upstream=scratch / "web.sock",
    )
    (scratch / "prometheus").mkdir(exist_ok=True)
    env = {
        **env,
        "PYTHONUNBUFFERED": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(scratch / "prometheus"),
        "LOG_LEVEL": os.environ.get("LOG_LEVEL") or "INFO",
        "LEDGER_METRICS_TOKEN": TOKEN,
    }
    procs = []
    with (scratch / "web.log").open("ab") as log:
        for service in services:
            procs.append(
                subprocess.Popen(
                    service.argv,
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    label = f"{workers} gunicorn workers × {threads} threads, {', '.join(s.name for s in services)}"
    server = Server(f"http://127.0.0.1:{port}", procs[0], label)
    try:
        wait_healthy(server)
        yield server
    finally:
        for proc in reversed(procs):
            stop_group(proc)


def worker_rss_mb(master: int) -> list[float]:
    """Resident memory of each child of gunicorn's master, in MB."""
    sizes = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == master:
                sizes.append(int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20)
    return sorted(sizes)


def sample_memory(master: int, stop: float, into: list[tuple[float, list[float]]]) -> None:
    while time.monotonic() < stop:
        into.append((time.monotonic(), worker_rss_mb(master)))
        time.sleep(max(0.0, min(10.0, stop - time.monotonic())))
    into.append((time.monotonic(), worker_rss_mb(master)))


def soak(server: Server, keys: list[str], opts: argparse.Namespace) -> dict:
    """Capacity, then the offered load with scrapes and memory samples; the table's numbers."""
    seed_unfinished(server.base_url, keys)
    closed_loop(server.base_url, keys, opts.clients, 5.0)  # warm-up, untimed
    capacity = closed_loop(server.base_url, keys, opts.clients, opts.capacity_seconds)
    rate = capacity * opts.fraction
    print(f"capacity {capacity:.1f} lifecycles/s; offering {rate:.1f}/s", flush=True)
    start = time.monotonic() + 1.0
    stop = start + opts.minutes * 60
    # Recovery tickets take a lifecycle's place: offer enough tickets for the lifecycle rate.
    offered = Offered(rate * 50 / 49, start, stop)
    scrapes, memory = Calls(), []
    side = [
        threading.Thread(
            target=scrape_every, args=(server.base_url, TOKEN, SCRAPE_SECONDS, stop, scrapes)
        ),
        threading.Thread(target=sample_memory, args=(server.proc.pid, stop, memory)),
    ]
    for thread in side:
        thread.start()
    calls = open_loop(server.base_url, keys, offered, opts.threads)
    for thread in side:
        thread.join()
    calls.rows.extend(scrapes.rows)
    return compare(calls, memory, start, stop, capacity, rate)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


def compare(
    calls: Calls, memory: list[tuple[float, list[float]]], start: float, stop: float,
    capacity: float, rate: float,
) -> dict:  # fmt: skip
    """The first window against the last: throughput, p99 per endpoint, errors, memory."""
    window = min(WINDOW_MINUTES * 60, (stop - start) / 3)
    first, last = (start, start + window), (stop - window, stop)

    def inside(t: float, span: tuple[float, float]) -> bool:
        return span[0] <= t < span[1]

    result: dict = {"capacity": capacity, "offered": rate, "window_minutes": window / 60}
    result["throughput"] = [
        sum(inside(t, span) for t in calls.lifecycles) / window for span in (first, last)
    ]
    result["p99_ms"] = {
        name: [
            _p99([ms for t, n, ms, _ in calls.rows if n == name and inside(t, s)])
            for s in (first, last)
        ]
        for name in (INTENT, OUTCOME, RECOVERY, METRICS)
    }
    result["calls"] = len(calls.rows)
    result["errors"] = sum(not ok for *_, ok in calls.rows)
    warm = [sizes for t, sizes in memory if t <= first[1]]
    result["rss_mb"] = [sum(warm[-1]) if warm else 0.0, sum(memory[-1][1]) if memory else 0.0]
    result["workers"] = len(memory[-1][1]) if memory else 0
    return result


def report(result: dict, opts: argparse.Namespace, label: str) -> int:
    (t0, t1), w = result["throughput"], result["window_minutes"]
    rows = [
        ("lifecycles/s", f"{t0:.1f}", f"{t1:.1f}", t1 / t0 if t0 else 0.0, f"≥ {THROUGHPUT_TARGET}")
    ]
    for name, (a, b) in result["p99_ms"].items():
        target = "reported" if name == METRICS else f"≤ {P99_TARGET}"
        rows.append((f"p99 {name} (ms)", f"{a:.1f}", f"{b:.1f}", b / a if a else 0.0, target))
    m0, m1 = result["rss_mb"]
    rows.append(
        (
            f"RSS of {result['workers']} workers (MB)",
            f"{m0:.0f}",
            f"{m1:.0f}",
            m1 / m0 if m0 else 0.0,
            "flat",
        )
    )
    print()
    print(f"Soak: {label}; {opts.agents} agents; capacity {result['capacity']:.1f} lifecycles/s, "
          f"offered {result['offered']:.1f}/s ({opts.fraction:.0%}) for {opts.minutes:g} min; "
          f"{result['calls']} calls, {result['errors']} errors.")  # fmt: skip
    first, last = f"first {w:g} min", f"last {w:g} min"
    print(f"{'':34} {first:>14} {last:>14} {'ratio':>7}  target")
    for name, a, b, ratio, target in rows:
        print(f"{name:34} {a:>14} {b:>14} {ratio:>7.2f}  {target}")
    met = t1 / t0 >= THROUGHPUT_TARGET if t0 else False
    p99s = [b / a for n, (a, b) in result["p99_ms"].items() if n != METRICS and a]
    met = met and all(r <= P99_TARGET for r in p99s)
    print(f"targets {'met' if met else 'missed'}")
    out = ROOT / "var" / "bench" / "soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({**result, "commit": code_version(), "minutes": opts.minutes}, indent=2)
    )
    return 1 if result["errors"] else 0


def benchmark(opts: argparse.Namespace) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL is not set (run it through `make bench`).")
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-")))
        name = bench_database(base_url, "soak")
        OWN_DATABASES.add(name)
        if not opts.keep_db:
            stack.callback(drop_quietly, base_url, name)
        agents = [f"soak-agent-{n}" for n in range(opts.agents)]
        env, keys = fresh_bench_database(base_url, name, agents)
        server = stack.enter_context(web(env, scratch))
        print(f"Soak benchmark: {server.label}; {os.cpu_count()} cores shared.", flush=True)
        result = soak(server, keys, opts)
        return report(result, opts, server.label)


if __name__ == "__main__":
    raise SystemExit(run_stoppable(lambda: benchmark(parse_args(sys.argv[1:]))))
