"""Auditor exports of 1,000,000 events: rows/s and peak memory, against raw COPY in the same run.

The database is filled set-based (`INSERT … SELECT generate_series`): 200,000 confirmed
effects of one agent over 60 days, five events each (intent, claim, an `unknown` outcome, the
reconciliation that found the charge, a late outcome) with a payment-like `data` payload, 99 %
of them sealed (so the export's LEFT JOIN on the seal table does real work), then
`VACUUM ANALYZE`.

Each measurement runs in a child process of its own, so that its peak RSS (`ru_maxrss`) is the
export's alone:

* **ledger csv / ledger jsonl** — the real code path: `django.test.Client` signed in as an
  auditor, `GET /audit/exports/events.csv` (`.jsonl`) through URL routing, middleware, the
  view and `ledger.audit.exports`, the streamed body written to /dev/null. Timed from the request
  to the last byte (the server's time; no network), after an untimed export of no rows (a
  process's first request builds the URLs, views and API: once per server, not per export).
  The export's own record must count every row and be finished.
* **raw statement csv / jsonl** — the ledger's own `COPY` statement run on a bare psycopg
  connection (no Django, no HTTP), read to /dev/null: what the query itself costs.
* **raw table** — `COPY ledger_effectevent TO STDOUT (FORMAT csv)` on bare psycopg: no
  order, no join, no formatting; the floor. The ratio ledger ÷ raw table is printed.
  `--days N` exports the newest N days only (the auditor's `since` filter); the floor is
  then `COPY (SELECT * FROM ledger_effectevent WHERE created_at >= since)`, the same rows.

Rounds are interleaved (ledger, raw statement, raw table, then the reverse, …) and the median
of each is reported. Goals: ≥ 50,000 rows/s and < 150 MiB peak RSS for the ledger's exports.

Runs in `<DATABASE_URL's database>_bench_exports`, created afresh and dropped at the end
unless --keep-db (--reuse-db measures a kept one again without refilling). The table also
goes to `var/bench/exports.json`. Exit status 0 also when a goal is missed (this is a
measurement); 1 when an export's row count or record is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu import CLOCK_TICKS, machine_ticks, process_ticks, process_title
from bench.harness import (
    EFFECT_COLUMNS,
    ROOT,
    bench_database,
    drop_quietly,
    fresh_bench_database,
    kept_database_env,
    options_from,
    run_stoppable,
)
from bench.report import machine_info, print_grid, write_result

RESULT_FILE = ROOT / "var" / "bench" / "exports.json"
RATE_GOAL = 50_000.0  # rows per second
RSS_GOAL_MIB = 150.0
FORMATS = ("csv", "jsonl")
AUDITOR = "bench-auditor"
RAW_TABLE_SQL = "COPY ledger_effectevent TO STDOUT (FORMAT csv)"
SINCE_ENV = "BENCH_EXPORTS_SINCE"  # a --days run's `since`, from the parent to its children
# One effect's life, as its five events: (kind, actor, from, to, reason).
LIFE = (
    ("intent", "agent:bench", "", "planned", ""),
    ("transition", "agent:bench", "planned", "dispatching", "claimed by worker-1"),
    ("transition", "agent:bench", "dispatching", "unknown", "timeout"),
    ("reconciliation", "system:reconciler", "unknown", "confirmed", "found"),
    ("late_outcome", "agent:bench", "confirmed", "confirmed", "stale_lease"),
)


@dataclass(frozen=True)
class Options:
    events: int
    effects: int
    rounds: int
    days: int
    keep_db: bool
    reuse_db: bool


def parse_args(argv: list[str]) -> tuple[Options, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1000000)")
    parser.add_argument("--effects", type=int, default=200_000, help="effects (200000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--days", type=int, default=0, help="export the newest N days (0: all)")
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--reuse-db", action="store_true", help="measure a kept database again, without refilling"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.events < args.effects:
        parser.error("--events must be at least --effects")
    if args.days < 0:
        parser.error("--days must not be negative")
    return options_from(args, Options), args.child


# --- Filling the database --------------------------------------------------------------------


def fill(url: str, effects: int, events: int) -> None:
    """Effects and their events in creation order, 60 days of history; ids grow with time
    (like time-ordered UUIDs), which keeps a million rows to seconds."""
    import psycopg

    per_effect = events / effects
    kinds, actors, froms, tos, reasons = (list(column) for column in zip(*LIFE, strict=True))
    with psycopg.connect(url, autocommit=True) as conn:
        agent_id = conn.execute("SELECT id FROM ledger_agent WHERE name = 'bench'").fetchone()[0]
        conn.execute(
            f"""
            INSERT INTO ledger_effect ({EFFECT_COLUMNS})
            SELECT (lpad(to_hex(g), 12, '0') || left(md5(g::text), 20))::uuid, %(agent)s,
                   'exp:' || g, 'run-' || (g / 20), 'step-' || g, g %% 20 + 1, 'action',
                   'charge_card', 'acct_' || (g %% 977),
                   jsonb_build_object('amount', 10.10 + g %% 100, 'currency', 'EUR',
                                      'card', '[card:' || left(md5('c' || g), 24) || ']'),
                   'v1:' || md5(g::text),
                   'el_' || lpad(to_hex(g), 8, '0') || left(md5('k' || g), 24), 'confirmed', 1,
                   3, 'worker-1', NULL, NULL, NULL, NULL, NULL, 1, NULL, NULL,
                   'ch_' || left(md5('r' || g), 24),
                   jsonb_build_object('id', 'ch_' || left(md5('r' || g), 24), 'paid', true),
                   NULL, '', '', NULL,
                   jsonb_build_object('model', 'bench-model', 'prompt_hash', md5('p' || g)),
                   t.at, t.at + interval '3 seconds', t.at + interval '3 seconds', 4
              FROM generate_series(1, %(effects)s) g
              CROSS JOIN LATERAL (
                  SELECT now() - interval '60 days' + (g::float8 / %(effects)s) * interval '60 days'
                         AS at) t
            """,
            {"agent": agent_id, "effects": effects},
        )
        conn.execute(
            """
            INSERT INTO ledger_effectevent (
                effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
            SELECT (lpad(to_hex(e), 12, '0') || left(md5(e::text), 20))::uuid,
                   (%(kinds)s::text[])[step], (%(actors)s::text[])[step],
                   (%(froms)s::text[])[step], (%(tos)s::text[])[step],
                   (%(reasons)s::text[])[step],
                   jsonb_build_object('status', (%(tos)s::text[])[step],
                                      'provider_ref', 'ch_' || left(md5('r' || e), 24),
                                      'amount', 10.10 + e %% 100, 'note', 'événement ' || g),
                   md5(g::text) || md5('d' || g),
                   now() - interval '60 days' + (e::float8 / %(effects)s) * interval '60 days'
                       + step * interval '1 second'
              FROM generate_series(1, %(events)s) g
              CROSS JOIN LATERAL (
                  SELECT least(floor((g - 1) / %(per)s)::bigint + 1, %(effects)s) AS e,
                         (g - 1) %% %(steps)s + 1 AS step) x
            """,
            {
                "kinds": kinds,
                "actors": actors,
                "froms": froms,
                "tos": tos,
                "reasons": reasons,
                "effects": effects,
                "events": events,
                "per": per_effect,
                "steps": len(LIFE),
            },
        )
        # The sealer has caught up with all but the newest 1 %.
        conn.execute(
            """
            INSERT INTO ledger_eventseal (seq, event_id, prev_hash, hash, sealed_at)
            SELECT row_number() OVER (ORDER BY id), id, md5('p' || id) || md5('q' || id),
                   md5('h' || id) || md5('i' || id), created_at + interval '1 minute'
              FROM ledger_effectevent
             WHERE id <= (SELECT max(id) * 0.99 FROM ledger_effectevent)
            """
        )
        conn.execute("VACUUM ANALYZE")


def window(url: str, days: int) -> tuple[str, int]:
    """`since` for the newest `days` days, as an auditor types it ("" for all), and its rows."""
    import psycopg

    query = """
        SELECT to_char(s, 'YYYY-MM-DD"T"HH24:MI:SS'), (SELECT count(*) FROM ledger_effectevent
                WHERE %(days)s = 0 OR created_at >= s AT TIME ZONE 'UTC')
          FROM (SELECT date_trunc('second', max(created_at) AT TIME ZONE 'UTC')
                       - make_interval(days => %(days)s) AS s FROM ledger_effectevent) w
    """
    with psycopg.connect(url) as conn:
        since, rows = conn.execute(query, {"days": days}).fetchone()
    return since if days else "", rows


def _filter() -> dict[str, str]:
    return {"since": os.environ[SINCE_ENV]} if os.environ.get(SINCE_ENV) else {}


# --- The measured children -------------------------------------------------------------------


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_ledger(fmt: str) -> dict[str, Any]:
    """The real path: client → URL → middleware → view → ledger.audit.exports → /dev/null."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from ledger.models import AuditExport
    from ledger.policy.roles import AUDITOR as ROLE
    from ledger.policy.roles import grant

    user, _ = User.objects.get_or_create(username=AUDITOR)
    grant(user, ROLE)
    client = Client()
    client.force_login(user)
    # Untimed: the process's first request (~0.3 s of CPU building URLs, views and the API).
    warm_up = client.get(f"/audit/exports/events.{fmt}", {"since": "2999-01-01"})
    b"".join(warm_up.streaming_content)
    before = _rss_mib()
    written = 0
    with open(os.devnull, "wb") as sink:
        start, cpu = time.perf_counter(), _cpu_seconds()
        response = client.get(f"/audit/exports/events.{fmt}", _filter())
        if response.status_code != 200:
            raise RuntimeError(f"export answered {response.status_code}: {response.content!r}")
        for chunk in response.streaming_content:
            written += len(chunk)
            sink.write(chunk)
        response.close()
        seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    record = AuditExport.objects.filter(username=AUDITOR).latest("id")
    return {
        "rows": record.rows,
        "finished": record.finished_at is not None,
        "bytes": written,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_before_mib": before,
        "peak_rss_mib": _peak_mib(),
    }


def _raw_copy(url: str, statement: str, before: float, settings: str = "") -> dict[str, Any]:
    import psycopg

    rows = written = 0
    with psycopg.connect(url) as conn, open(os.devnull, "wb") as sink:
        start, cpu = time.perf_counter(), _cpu_seconds()
        if settings:  # the export's SET LOCAL, in the COPY's transaction
            conn.execute(settings)
        with conn.cursor() as cursor, cursor.copy(statement) as copy:
            while data := copy.read():
                rows += 1
                written += len(data)
                sink.write(data)
        seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    return {
        "rows": rows,
        "finished": True,
        "bytes": written,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_before_mib": before,
        "peak_rss_mib": _peak_mib(),
    }


def child_raw_statement(fmt: str) -> dict[str, Any]:
    """The ledger's own COPY and planner settings on bare psycopg; Django only builds the SQL."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connections

    from ledger.audit.exports import PLANNER_SETTINGS, ExportFilter, copy_statement

    filters = ExportFilter(_filter(), dataset="events")
    if not filters.is_valid():
        raise RuntimeError(filters.errors)
    statement = copy_statement(filters, fmt)
    connections.close_all()
    return _raw_copy(os.environ["DATABASE_URL"], statement, _rss_mib(), PLANNER_SETTINGS["events"])


def child_raw_table() -> dict[str, Any]:
    """A plain COPY of the rows the export selects: the whole table, or the --days window."""
    since = _filter().get("since")  # made by window(): digits, dashes, colons and a T
    where = f"SELECT * FROM ledger_effectevent WHERE created_at >= '{since}+00'"
    statement = f"COPY ({where}) TO STDOUT (FORMAT csv)" if since else RAW_TABLE_SQL
    return _raw_copy(os.environ["DATABASE_URL"], statement, _rss_mib())


def run_child(which: str) -> int:
    kind, _, fmt = which.partition(":")
    if kind == "ledger":
        result = child_ledger(fmt)
    elif kind == "statement":
        result = child_raw_statement(fmt)
    else:
        result = child_raw_table()
    print(json.dumps(result))
    return 0


# --- The parent: rounds, table ---------------------------------------------------------------

CONTENDERS = (
    ("ledger csv", "ledger:csv"),
    ("ledger jsonl", "ledger:jsonl"),
    ("raw statement csv", "statement:csv"),
    ("raw statement jsonl", "statement:jsonl"),
    ("raw table (COPY ledger_effectevent)", "table"),
)


@dataclass
class Row:
    contender: str
    rows: int
    seconds: float
    rows_per_s: float
    mib_per_s: float
    peak_rss_mib: float
    rss_before_mib: float
    exporter_cpu_s: float
    postgres_cpu_s: float
    rows_per_cpu_s: float
    other_share: float


@dataclass
class CpuSampler:
    """CPU ticks of this run's PostgreSQL processes and of the whole machine while a child
    runs, sampled from /proc every 0.2 s: PostgreSQL's parallel workers live only as long as
    the query, so they count up to their last sample."""

    database: str
    first: dict[int, int] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)
    ours: set[int] = field(default_factory=set)
    machine: tuple[int, int] = (0, 0)
    stop: threading.Event = field(default_factory=threading.Event)

    def _sample(self) -> None:
        for pid, comm, _pgrp, ticks in process_ticks():
            if not comm.startswith("postgres"):
                continue
            self.first.setdefault(pid, ticks)
            self.last[pid] = ticks
            if pid not in self.ours:
                try:
                    title = process_title(pid)
                except OSError:
                    continue
                backend = f" {self.database} " in title
                worker = any(f"parallel worker for PID {b}" in title for b in self.ours)
                if backend or worker:
                    self.ours.add(pid)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._sample()
        # Processes seen at the start count from there; those born later from zero.
        self.first = dict(self.last)
        self.machine = machine_ticks()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._sample()
        total, busy = machine_ticks()
        self.elapsed_ticks = total - self.machine[0]
        self.busy_ticks = busy - self.machine[1]

    def postgres_seconds(self) -> float:
        return sum(self.last[p] - self.first.get(p, 0) for p in self.ours) / CLOCK_TICKS


def measure(env: dict[str, str], which: str, database: str) -> dict[str, Any]:
    with CpuSampler(database) as cpu:
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", which],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"child {which} failed:\n{out}\n{err}")
    result = json.loads(out.strip().splitlines()[-1])
    result["postgres_cpu_seconds"] = cpu.postgres_seconds()
    # Everything else the machine did meanwhile (other people's work): a warning sign.
    ours = result["cpu_seconds"] * CLOCK_TICKS + result["postgres_cpu_seconds"] * CLOCK_TICKS
    result["other_share"] = max(0.0, cpu.busy_ticks - ours) / max(1, cpu.elapsed_ticks)
    return result


def benchmark(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL must be set (run it under `devstack.stack exec`).")
    name = bench_database(base_url, "bench_exports")
    print(f"Export benchmark on {os.cpu_count()} CPUs; database {name}.", flush=True)
    try:
        if opts.reuse_db:
            env = kept_database_env(base_url, name)
        else:
            start = time.perf_counter()
            env, _ = fresh_bench_database(base_url, name, ["bench"])
            fill(env["DATABASE_URL"], opts.effects, opts.events)
            print(
                f"  {opts.effects:,} effects, {opts.events:,} events (99 % sealed) in "
                f"{time.perf_counter() - start:.1f} s",
                flush=True,
            )
        since, expected = window(env["DATABASE_URL"], opts.days)
        env = {**env, SINCE_ENV: since}
        print(f"  exporting {expected:,} events (since={since or 'the first'})", flush=True)
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in CONTENDERS}
        for round_no in range(opts.rounds):
            order = CONTENDERS if round_no % 2 == 0 else CONTENDERS[::-1]
            for label, which in order:
                result = measure(env, which, name)
                results[label].append(result)
                print(
                    f"  round {round_no + 1}: {label}: {result['rows'] / result['seconds']:,.0f} "
                    f"rows/s, peak RSS {result['peak_rss_mib']:.0f} MiB, CPU "
                    f"{result['cpu_seconds']:.1f} s here + {result['postgres_cpu_seconds']:.1f} s "
                    f"PostgreSQL, other load {100 * result['other_share']:.0f}%",
                    flush=True,
                )
    finally:
        if not opts.keep_db and not opts.reuse_db:
            drop_quietly(base_url, name)
    return report(opts, results, expected)


def report(opts: Options, results: dict[str, list[dict[str, Any]]], expected: int) -> int:
    rows: list[Row] = []
    for label, runs in results.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        count = runs[0]["rows"]
        exporter = statistics.median(r["cpu_seconds"] for r in runs)
        postgres = statistics.median(r["postgres_cpu_seconds"] for r in runs)
        rows.append(
            Row(
                contender=label,
                rows=count,
                seconds=seconds,
                rows_per_s=count / seconds,
                mib_per_s=statistics.median(r["bytes"] for r in runs) / seconds / 2**20,
                peak_rss_mib=max(r["peak_rss_mib"] for r in runs),
                rss_before_mib=max(r["rss_before_mib"] for r in runs),
                exporter_cpu_s=exporter,
                postgres_cpu_s=postgres,
                rows_per_cpu_s=count / max(exporter + postgres, 1e-9),
                other_share=max(r["other_share"] for r in runs),
            )
        )
    floor = rows[-1]
    print()
    print_grid(
        (
            "contender",
            "rows",
            "median s",
            "rows/s",
            "÷ raw table",
            "MiB/s",
            "peak RSS MiB",
            "RSS before",
            "CPU s here",
            "CPU s PG",
            "rows/CPU-s",
            "÷ raw table",
        ),
        [
            (
                r.contender,
                f"{r.rows:,}",
                f"{r.seconds:.2f}",
                f"{r.rows_per_s:,.0f}",
                f"{r.rows_per_s / floor.rows_per_s:.2f}",
                f"{r.mib_per_s:.0f}",
                f"{r.peak_rss_mib:.0f}",
                f"{r.rss_before_mib:.0f}",
                f"{r.exporter_cpu_s:.1f}",
                f"{r.postgres_cpu_s:.1f}",
                f"{r.rows_per_cpu_s:,.0f}",
                f"{r.rows_per_cpu_s / floor.rows_per_cpu_s:.2f}",
            )
            for r in rows
        ],
        right_align=True,
    )
    print(
        "\n  rows/CPU-s: rows per second of CPU spent by the exporting process and this run's "
        "PostgreSQL processes together, i.e. the rate on one core of its own; steadier than "
        "rows/s when other work shares the machine."
    )
    busiest = max(r.other_share for r in rows)
    if busiest > 0.1:
        print(
            f"  warning: other processes used up to {100 * busiest:.0f}% of the machine during "
            "the runs; rows/s are lower than on a quiet machine (rows/CPU-s are steadier)"
        )
    checks = {
        f"{label}: {expected:,} rows, record finished": all(
            r["rows"] == expected and r["finished"] for r in runs
        )
        for label, runs in results.items()
        if label.startswith("ledger")
    }
    print()
    goals = []
    for r in rows[:2]:
        goals += [
            (
                f"{r.contender}: rows/s",
                f"{r.rows_per_s:,.0f}",
                f"≥ {RATE_GOAL:,.0f}",
                "yes" if r.rows_per_s >= RATE_GOAL else "NO",
            ),
            (
                f"{r.contender}: rows/CPU-s (steadier twin)",
                f"{r.rows_per_cpu_s:,.0f}",
                f"≥ {RATE_GOAL:,.0f}",
                "yes" if r.rows_per_cpu_s >= RATE_GOAL else "NO",
            ),
            (
                f"{r.contender}: peak RSS",
                f"{r.peak_rss_mib:.0f} MiB",
                f"< {RSS_GOAL_MIB:.0f} MiB",
                "yes" if r.peak_rss_mib < RSS_GOAL_MIB else "NO",
            ),
        ]
    goals += [
        (name, "yes" if ok else "no", "yes", "yes" if ok else "NO") for name, ok in checks.items()
    ]
    print_grid(("goal", "measured", "goal", "met?"), goals)
    write_result(
        RESULT_FILE,
        {
            "machine": machine_info(),
            "options": asdict(opts),
            "rows": [asdict(r) for r in rows],
            "runs": results,
            "checks": checks,
        },
    )
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    opts, child = parse_args(sys.argv[1:] if argv is None else argv)
    if child:
        return run_child(child)
    return run_stoppable(lambda: benchmark(opts), restore_sigint=True)


if __name__ == "__main__":
    sys.exit(main())
