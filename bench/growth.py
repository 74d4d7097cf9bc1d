"""Growth: the agent's calls and the operator pages as the event log grows, and archiving a
month.

The event log is partitioned by month (ADR 0016), so what an agent's call touches (this
month's partition, the effects' indexes) should not grow with history. The script measures in
one database, as history is added to it in SQL (`bench/growth_data.py`):

1. lifecycle throughput (`POST /effects` with claim, then the outcome, 8 clients under
   gunicorn, as `bench/lifecycle.py` does) with 0 events of history, then 5 M, then 20 M —
   each as a ratio to a database without history (`<db>_growth0`, its own gunicorn) measured
   in interleaved rounds at the same time, goal ≥ 0.9;
2. the review queue's and an effect page's server time, p95, at 0 and at the largest size
   (requests in-process through Django's test client, signed in as an operator);
3. `manage.py archive` of the 5 M-event month (the oldest): its duration and its peak RSS
   (VmHWM, goal < 200 MiB), after the sealer has sealed that month.

History is terminal effects with ten events each: the first 5 M events in the month three
months back (the one archived), the rest split between the two months after it. The database
is `<DATABASE_URL's database>_growth`, dropped at the end unless --keep-db. The table is
printed and written to `var/bench/growth.json`. Exit status 0, also when a goal is missed;
1 when a run had errors or the archive failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import growth_data as data
from bench.harness import (
    ROOT,
    bench_database,
    code_version,
    drop_quietly,
    fresh_bench_database,
    run_stoppable,
    setup_django,
    sql_exec,
)
from bench.lifecycle_clients import HttpSession
from bench.lifecycle_load import LoadContender, Options, gunicorn, summarise
from bench.report import machine_info, percentile, print_grid, write_result

THROUGHPUT_GOAL = 0.9
RSS_GOAL_MIB = 200


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="5000000,20000000",
        help="event counts measured after the empty run, ascending (5000000,20000000)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="lifecycle rounds per size (3)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per round (5)")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up per round (2)")
    parser.add_argument("--page-requests", type=int, default=40, help="per page and size (40)")
    parser.add_argument("--skip-archive", action="store_true")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.sizes != sorted(args.sizes) or any(s <= 0 for s in args.sizes):
        parser.error("--sizes must be ascending positive event counts")
    return args


def lifecycle_options(args: argparse.Namespace) -> Options:
    return Options(
        clients=8,
        rounds=args.rounds,
        duration=args.duration,
        warmup=args.warmup,
        workers=2,
        threads=4,
        client_processes=1,
        reconnect_every=20,
        skip_dbos=True,
        keep_db=args.keep_db,
        profile=False,
        profile_lifecycles=0,
    )


def measure_lifecycles(servers: dict, opts: Options, size: int) -> dict:
    """Interleaved rounds against the grown database and an empty one (grown, empty, then
    empty, grown, …): the ratio compares them under the same load on the machine."""
    contenders = {
        which: LoadContender(
            f"{which} ({size:,} events)" if which == "grown" else which,
            lambda c, s=server, k=key: HttpSession(s.base_url, k, c, opts.reconnect_every),
            opts,
            server,
        )
        for which, (server, key) in servers.items()
    }
    rounds: dict[str, list] = {which: [] for which in contenders}
    for n in range(opts.rounds):
        for which in list(contenders)[:: 1 if n % 2 == 0 else -1]:
            rounds[which].append(contenders[which].measure())
    found = {}
    for which, measured in rounds.items():
        result = summarise(which, "lifecycles", measured)
        found[which] = {"rate": result.rate, "p50_ms": result.p50_ms, "p99_ms": result.p99_ms,
                        "errors": result.errors, "rounds": result.rounds}  # fmt: skip
    grown, empty = found["grown"]["rate"], found["empty"]["rate"]
    found["ratio"] = grown / empty if grown and empty else None
    found["errors"] = found["grown"]["errors"] + found["empty"]["errors"]
    print(
        f"  {size:,} events: {grown:.1f} lifecycles/s against {empty:.1f}/s on an empty "
        f"database in the same rounds (ratio {found['ratio']:.2f}); p99 "
        f"{found['grown']['p99_ms']:.1f} / {found['empty']['p99_ms']:.1f} ms",
        flush=True,
    )
    return found


def measure_pages(requests: int) -> dict:
    """p95 server time (ms) of the review queue and of effect pages, in-process."""
    from django.test import Client

    from bench.pages_dataset import people

    client = Client()
    client.force_login(people()[0])
    sample = data.sample_effects(max(requests, 1))
    pages = {
        "queue": lambda n: "/queue/",
        "effect": lambda n: f"/effects/{sample[n % len(sample)]}/",
    }
    found = {}
    for name, path in pages.items():
        for n in range(5):  # warm-up
            client.get(path(n))
        times = []
        for n in range(requests):
            began = time.perf_counter()
            response = client.get(path(n))
            times.append(1000 * (time.perf_counter() - began))
            if response.status_code != 200:
                raise RuntimeError(f"{path(n)} answered {response.status_code}")
        found[name] = {"p95_ms": percentile(sorted(times), 0.95),
                       "p50_ms": statistics.median(times)}  # fmt: skip
    print(f"  pages: {json.dumps(found)}", flush=True)
    return found


def grow(agent_id: int, target: int, state: dict) -> float:
    """History up to `target` generated events: the first 5 M in the oldest month, the rest
    split between the next two. Returns the seconds it took."""
    began = time.monotonic()
    oldest = state["months"][0]
    while state["generated"] < target:
        placed = state["generated"]
        if placed < state["archive_events"]:
            month, room = oldest, state["archive_events"] - placed
        else:
            month = state["months"][1 + (placed // 10) % 2]
            room = min(target - placed, 1_000_000)
        chunk = min(room, target - placed)
        state["next"] = data.fill_month(agent_id, month, chunk, state["next"])
        state["generated"] += chunk
    # As a history written over months would be: vacuumed and analysed (autovacuum would
    # otherwise run through the measurement).
    sql_exec("VACUUM (ANALYZE) ledger_effect, ledger_effectevent")
    return time.monotonic() - began


def archive_once(env: dict, month, partition: str) -> dict:
    """`manage.py archive` of `month` in its own process: duration, peak RSS, output."""
    sealed, seal_seconds = data.seal_month(partition)
    print(f"  sealed {sealed} events in {seal_seconds:.0f} s", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="growth-archive-"))
    next_month = data.months_back(month, -1)
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "archive", "--before", f"{next_month:%Y-%m}",
             "--to", str(folder)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        peak_kib = 0
        while proc.poll() is None:
            peak_kib = max(peak_kib, _high_water_kib(proc.pid))
            time.sleep(0.1)
        out.seek(0)
        output = out.read()
    seconds = time.monotonic() - began
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    shutil.rmtree(folder, ignore_errors=True)
    result = {"seconds": round(seconds, 1), "peak_rss_mib": round(peak_kib / 1024, 1),
              "exit": proc.returncode, "export_mib": round(size / 2**20),
              "seal_seconds": round(seal_seconds), "output": output.strip()[-600:]}  # fmt: skip
    print(f"  archive: {json.dumps(result)}", flush=True)
    return result


def _high_water_kib(pid: int) -> int:
    """The process's own peak RSS (VmHWM). Not getrusage: a child started by vfork and exec
    reports the parent's peak as its own, and this process is large by then."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def benchmark(args: argparse.Namespace) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL is not set (run it through `make bench`).")
    opts = lifecycle_options(args)
    name, empty_name = bench_database(base_url, "growth"), bench_database(base_url, "growth0")
    print(f"Growth benchmark: history of {', '.join(f'{s:,}' for s in args.sizes)} events.")
    with contextlib.ExitStack() as stack:
        if not args.keep_db:
            stack.callback(drop_quietly, base_url, name)
            stack.callback(drop_quietly, base_url, empty_name)
        empty_env, (empty_key,) = fresh_bench_database(base_url, empty_name, ["bench"])
        env, (key,) = fresh_bench_database(base_url, name, ["bench"])
        setup_django(env)
        from datetime import date

        from ledger.audit import partitions
        from ledger.models import Agent

        today = date.today()
        months = [data.months_back(today, n) for n in (3, 2, 1)]
        data.ensure_months(months)
        state = {"months": months, "generated": 0, "next": 1,
                 "archive_events": min(5_000_000, args.sizes[0])}  # fmt: skip
        agent_id = Agent.objects.get(name="bench").id
        servers = {
            "grown": (stack.enter_context(gunicorn("config.wsgi:application", env, opts)), key),
            "empty": (
                stack.enter_context(gunicorn("config.wsgi:application", empty_env, opts)),
                empty_key,
            ),
        }
        print("0 events of history:", flush=True)
        runs = {0: measure_lifecycles(servers, opts, 0)}
        pages = {0: measure_pages(args.page_requests)}
        grown = {}
        for size in args.sizes:
            grown[size] = grow(agent_id, size, state)
            print(f"{data.event_count():,} events ({grown[size]:.0f} s to generate):", flush=True)
            runs[size] = measure_lifecycles(servers, opts, size)
        pages[args.sizes[-1]] = measure_pages(args.page_requests)
        archived = None
        if not args.skip_archive:
            archived = archive_once(env, months[0], partitions.name_of(months[0]))
    return report(args, runs, pages, archived, state["archive_events"])


def report(args, runs: dict, pages: dict, archived: dict | None, month_events: int) -> int:
    rows = []
    for size, run in runs.items():
        ratio = run["ratio"]
        met = "" if ratio is None else (" met" if ratio >= THROUGHPUT_GOAL else " NOT MET")
        rows.append([f"lifecycles/s at {size:,} events", f"{run['grown']['rate']:.1f}",
                     "" if ratio is None else f"{ratio:.2f}",
                     f"{run['empty']['rate']:.1f}/s empty; ≥ {THROUGHPUT_GOAL}{met}"])  # fmt: skip
    largest = max(pages)
    for page in ("queue", "effect"):
        before, after = pages[0][page]["p95_ms"], pages[largest][page]["p95_ms"]
        rows.append([f"{page} page p95 at {largest:,} events", f"{after:.1f} ms",
                     f"{after / before:.2f}", f"{before:.1f} ms at 0"])  # fmt: skip
    if archived:
        rss = archived["peak_rss_mib"]
        rows.append(
            [
                f"archive of a {month_events:,}-event month",
                f"{archived['seconds']} s",
                f"{rss} MiB peak RSS",
                f"< {RSS_GOAL_MIB} MiB" + (" met" if rss < RSS_GOAL_MIB else " NOT MET"),
            ]
        )
    print()
    print_grid(["measurement", "value", "ratio", "baseline (same run) / goal"], rows)
    write_result(ROOT / "var" / "bench" / "growth.json", {
        "commit": code_version(), "machine": machine_info(), "lifecycles": runs,
        "pages": pages, "archive": archived, "archive_month_events": month_events,
    })  # fmt: skip
    failed = any(r["errors"] for r in runs.values()) or (archived and archived["exit"] != 0)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_stoppable(lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
