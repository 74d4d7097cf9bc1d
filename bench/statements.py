"""Importing a provider statement of 1,000,000 lines: seconds and peak memory of the ledger's
own import (`ledger.statements.import_statement`), against a bare COPY of the same file.

The database is filled set-based: 1,000,000 effects of one tool that declares statements, all
dispatched during one past day: 98 % confirmed by their agents (their lines agree and move
nothing), 2 % `unknown` after a timeout (their lines confirm them, or, for one in 1,000, open
`amount_mismatch` with a wrong amount), and one in 5,000 `unknown` with no line at all (its
dispatch window lies inside the final statement: absence proven, back to planned). The
statement file (CSV, written by the database with COPY) holds a line for every effect but the
absent ones, and as many orphan lines (references no effect has) to make 1,000,000 lines.

Measured in a child process of its own, so that its peak RSS (`ru_maxrss`) is the import's
alone: the whole `import_statement` (parse, COPY into staging, match by reference, apply in
batches of 5,000 with one commit each, prove absence), then the bare floor: `COPY` of the same
file into an unlogged table of text columns, no parsing, no matching. Afterwards the next day's
(empty) final statement is imported, which turns the orphan lines into incidents, and every
count is checked. Goals: under 60 s and under 200 MiB peak RSS.

Database `…_bench_statements` (`bench.children`); the table also goes to
`var/bench/statements.json`; exit status 1 only when a count is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.children import (
    base_database_url,
    child_options,
    measure_in_child,
    parent_or_child,
    rss_mib,
)
from bench.harness import (
    EFFECT_COLUMNS,
    ROOT,
    bench_database,
    bench_env,
    drop_quietly,
    options_from,
    setup_django,
)
from bench.report import machine_info, print_grid, write_result
from devstack.provision import fresh_database

RESULT_FILE = ROOT / "var" / "bench" / "statements.json"
WORK = ROOT / "var" / "bench" / "statements"
SECONDS_GOAL = 60.0
RSS_GOAL_MIB = 200.0
TOOL = "bench_statements"
TOOLS = f"""
[tools.{TOOL}]
description = "The statements benchmark's payments tool: no keys, no lookup, statements."
preset = "unsafe"
statements = true
amount_path = "amount"
currency_path = "currency"
amount_unit = "major"
settle_after = "2m"
statement_skew = "5m"
reconciler = "manual"
"""
UNKNOWN_EVERY, MISMATCH_EVERY, ABSENT_EVERY = 50, 1000, 5000


@dataclass(frozen=True)
class Options:
    lines: int
    keep_db: bool


def parse_args(argv: list[str]) -> tuple[Options, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines (1000000)")
    child_options(parser)
    args = parser.parse_args(argv)
    check_lines(parser, args.lines)
    return options_from(args, Options), args.child


def check_lines(parser: argparse.ArgumentParser, lines: int) -> None:
    if lines < ABSENT_EVERY:
        parser.error(f"--lines must be at least {ABSENT_EVERY}")


def period(now: datetime) -> tuple[datetime, datetime]:
    """The day before yesterday (UTC): over, and far from the clock."""
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start - timedelta(days=2), start - timedelta(days=1)


def expected(lines: int) -> dict[str, int]:
    """What the import must count: every unknown effect with a line is confirmed but the
    mismatched ones (a line's amount off, where no absent one); the absent ones retried."""
    unknown = lines // UNKNOWN_EVERY
    absent = lines // ABSENT_EVERY
    mismatched = lines // MISMATCH_EVERY - absent
    return {
        "lines": lines,
        "lines_matched": lines - absent,
        "confirmed": unknown - absent - mismatched,
        "reviews": mismatched,
        "retried": absent,
        "orphans": absent,
    }


# --- Filling the database and writing the file -----------------------------------------------

# Effect g (1…N): its id, key and dispatch time, as SQL over g.
_ID = "(lpad(to_hex(g), 12, '0') || left(md5(g::text), 20))::uuid"
_KEY = "'el_' || lpad(to_hex(g), 8, '0') || left(md5('k' || g), 24)"
_CLAIM = "%(start)s::timestamptz + interval '1 hour' + (g::float8 / %(n)s) * interval '20 hours'"


def filled_database(base_url: str, name: str, lines: int, path: Path) -> dict[str, str]:
    """Database `name` afresh with the statements tool and `lines` effects of one past day, the
    ledger's own statement of that day written to `path`; the environment on the database."""
    WORK.mkdir(parents=True, exist_ok=True)
    tools = WORK / "tools.toml"
    tools.write_text(TOOLS)
    env, _ = fresh_database(bench_env(base_url), name, tools=tools, agents=["bench"])
    import psycopg

    with psycopg.connect(env["DATABASE_URL"]) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]
    fill(env["DATABASE_URL"], lines, period(now)[0], path)
    return env


def fill(url: str, n: int, start: datetime, path: Path) -> None:
    import psycopg

    params = {"n": n, "start": start, "unknown": UNKNOWN_EVERY, "absent": ABSENT_EVERY}
    with psycopg.connect(url, autocommit=True) as conn:
        agent = conn.execute("SELECT id FROM ledger_agent WHERE name = 'bench'").fetchone()[0]
        conn.execute(
            f"""
            INSERT INTO ledger_effect ({EFFECT_COLUMNS})
            SELECT {_ID}, %(agent)s, 'stm:' || g, 'run-' || (g / 20), 'step-' || g,
                   g %% 20 + 1, 'action', '{TOOL}', 'acct_' || (g %% 977),
                   jsonb_build_object('amount', '12.50', 'currency', 'EUR'),
                   'v1:' || md5(g::text), {_KEY},
                   CASE WHEN g %% %(unknown)s = 0 THEN 'unknown' ELSE 'confirmed' END, 1, 3,
                   'worker-1', NULL, NULL, NULL, NULL, NULL, 0,
                   {_CLAIM} + interval '30 seconds', NULL,
                   CASE WHEN g %% %(unknown)s = 0 THEN '' ELSE 'ch_' || g END,
                   NULL, NULL, '', '', NULL, '{{}}'::jsonb, {_CLAIM}, {_CLAIM},
                   CASE WHEN g %% %(unknown)s = 0 THEN NULL ELSE {_CLAIM} END, 4
              FROM generate_series(1, %(n)s) g
            """,
            {**params, "agent": agent},
        )
        # The unknown effects' dispatch: claimed, then a timeout 30 seconds later.
        conn.execute(
            f"""
            INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status,
                                            reason, data, digest, created_at)
            SELECT {_ID}, 'transition', 'agent:bench', s.frm, s.too, s.reason, '{{}}',
                   md5(g::text) || md5(s.reason), {_CLAIM} + s.after
              FROM generate_series(%(unknown)s, %(n)s, %(unknown)s) g
             CROSS JOIN (VALUES ('planned', 'dispatching', 'claimed', interval '0'),
                                ('dispatching', 'unknown', 'timeout', interval '30 seconds'))
                   AS s(frm, too, reason, after)
            """,
            params,
        )
        conn.execute("VACUUM ANALYZE ledger_effect")
        conn.execute("VACUUM ANALYZE ledger_effectevent")
        # A line for every effect but the absent ones; as many orphans after them.
        lines = f"""
            SELECT 'ch_' || g, {_KEY},
                   CASE WHEN g %% {MISMATCH_EVERY} = 0 THEN '12.51' ELSE '12.50' END, 'EUR',
                   'succeeded',
                   to_char(({_CLAIM} + interval '10 seconds') AT TIME ZONE 'UTC',
                           'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'charge'
              FROM generate_series(1, %(n)s) g WHERE g %% %(absent)s <> 0
            UNION ALL
            SELECT 'ch_orphan_' || g, 'el_nobody_' || g, '9.99', 'EUR', 'succeeded',
                   to_char(({_CLAIM}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                   'charge'
              FROM generate_series(1, %(n)s / %(absent)s) g
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out, psycopg.ClientCursor(conn) as cursor:
            query = cursor.mogrify(lines, params)
            with cursor.copy(f"COPY ({query}) TO STDOUT (FORMAT csv, HEADER)") as copy:
                out.write(b"provider_ref,reference,amount,currency,status,occurred_at,type\n")
                header = True
                for chunk in copy:
                    data = bytes(chunk)
                    if header:  # the database's own header names the expressions
                        data = data.split(b"\n", 1)[1]
                        header = False
                    out.write(data)


# --- The children ----------------------------------------------------------------------------


def import_day(path: Path) -> dict[str, Any]:
    """The day's statement at `path` imported (Django set up, the tool reading its format):
    seconds, this process's CPU seconds and peak RSS, and the counts `expected` names. Then the
    next day's final statement, its header alone, which turns the orphan lines into incidents."""
    from ledger.effects.recovery import database_now
    from ledger.statements import import_statement

    start, end = period(database_now())
    before = rss_mib()
    began, cpu = time.perf_counter(), time.process_time()
    made = import_statement(
        TOOL, path, filename=path.name, period_start=start, period_end=end,
        provisional=False, by="system:bench", origin="command",
    )  # fmt: skip
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    peak = rss_mib()
    with path.open() as source:
        header = source.readline()
    nxt = import_statement(
        TOOL, header.encode(), filename="next.csv", period_start=end,
        period_end=end + timedelta(days=1), provisional=False, by="system:bench",
        origin="command",
    )  # fmt: skip
    counts = {name: getattr(made, name) for name in expected(0)}
    counts["orphans"] = nxt.orphans
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mib": peak,
            "rss_before_mib": before, "batches": made.batches, "phase": made.phase,
            "counts": counts}  # fmt: skip


def child_import(path: Path) -> dict[str, Any]:
    setup_django(bench_env(os.environ["DATABASE_URL"]))
    return import_day(path)


def child_copy(path: Path) -> dict[str, Any]:
    import psycopg

    before = rss_mib()
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        conn.execute(
            "CREATE UNLOGGED TABLE IF NOT EXISTS bench_raw_lines (provider_ref text, "
            "reference text, amount text, currency text, status text, occurred_at text, "
            "type text)"
        )
        conn.execute("TRUNCATE bench_raw_lines")
        began = time.perf_counter()
        with (
            conn.cursor() as cursor,
            path.open("rb") as source,
            cursor.copy("COPY bench_raw_lines FROM STDIN (FORMAT csv, HEADER)") as copy,
        ):
            while chunk := source.read(1 << 20):
                copy.write(chunk)
        conn.commit()
        seconds = time.perf_counter() - began
    return {"seconds": seconds, "peak_rss_mib": rss_mib(), "rss_before_mib": before}


# --- The parent ------------------------------------------------------------------------------


def benchmark(opts: Options) -> int:
    base_url = base_database_url()
    name = bench_database(base_url, "bench_statements")
    print(f"Statement import benchmark on {os.cpu_count()} CPUs; database {name}.", flush=True)
    path = WORK / f"statement-{opts.lines}.csv"
    try:
        began = time.perf_counter()
        env = filled_database(base_url, name, opts.lines, path)
        print(
            f"  {opts.lines:,} effects and a {path.stat().st_size / 2**20:.0f} MiB statement "
            f"in {time.perf_counter() - began:.1f} s",
            flush=True,
        )
        ledger = measure_in_child(__file__, env, f"import:{path}")
        floor = measure_in_child(__file__, env, f"copy:{path}")
    finally:
        path.unlink(missing_ok=True)
        if not opts.keep_db:
            drop_quietly(base_url, name)
    return report(opts, ledger, floor)


def report(opts: Options, ledger: dict[str, Any], floor: dict[str, Any]) -> int:
    rows = [
        ("ledger import_statement", ledger),
        ("raw COPY of the file (no parsing)", floor),
    ]
    print()
    print_grid(
        ("contender", "lines", "seconds", "lines/s", "÷ raw COPY", "peak RSS MiB", "RSS before"),
        [
            (
                label,
                f"{opts.lines:,}",
                f"{r['seconds']:.1f}",
                f"{opts.lines / r['seconds']:,.0f}",
                f"{r['seconds'] / floor['seconds']:.1f}",
                f"{r['peak_rss_mib']:.0f}",
                f"{r['rss_before_mib']:.0f}",
            )
            for label, r in rows
        ],
        right_align=True,
    )
    want = expected(opts.lines)
    checks = {f"{k} = {v:,}": ledger["counts"].get(k) == v for k, v in want.items()}
    checks["import finished (phase done)"] = ledger["phase"] == "done"
    print()
    print_grid(
        ("goal", "measured", "goal", "met?"),
        [
            ("seconds", f"{ledger['seconds']:.1f}", f"< {SECONDS_GOAL:.0f}",
             "yes" if ledger["seconds"] < SECONDS_GOAL else "NO"),
            ("peak RSS", f"{ledger['peak_rss_mib']:.0f} MiB", f"< {RSS_GOAL_MIB:.0f} MiB",
             "yes" if ledger["peak_rss_mib"] < RSS_GOAL_MIB else "NO"),
            *[(name, "yes" if ok else f"no ({ledger['counts']})", "yes", "yes" if ok else "NO")
              for name, ok in checks.items()],
        ],
    )  # fmt: skip
    print(f"\n  {ledger['batches']} batches; counts {ledger['counts']}")
    write_result(
        RESULT_FILE,
        {
            "machine": machine_info(),
            "options": asdict(opts),
            "ledger": ledger,
            "raw_copy": floor,
            "checks": checks,
        },
    )
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    opts, child = parse_args(sys.argv[1:] if argv is None else argv)
    return parent_or_child(child, in_child, lambda: benchmark(opts))


def in_child(what: str) -> dict[str, Any]:
    which, _, path = what.partition(":")
    return (child_import if which == "import" else child_copy)(Path(path))


if __name__ == "__main__":
    sys.exit(main())
