"""Restore mode's sweep of a lost window holding 100,000 provider records: the provider's listing
streamed page by page into the sweep (`reconcilers.gapsweep`), seconds and peak memory.

The payments sandbox (a real process) holds `--records` charges created in the lost window,
written straight into its store; the ledger holds an effect for each but one in 1,000 (the
charges whose intent the window lost). A child process enters restore mode, lists the window
through the payments adapter (pages of 100, `created[gte]`/`created[lt]`/`starting_after`)
and hands the listing to `ledger.restore.gap.account_for`, which stores and matches it 1,000
records at a time in one transaction and raises an incident for every charge no effect
explains; its peak RSS (`ru_maxrss`) is the sweep's alone. For comparison, the same sweep with
the listing read whole first (`tuple(records)`, as before the listing was streamed) runs on a
fresh copy of the database. Every count is checked. Goal: the streamed sweep under 200 MiB.

Database `…_bench_listing` and a copy (`bench.children`); the table also goes to
`var/bench/restore_listing.json`; exit status 1 only when a count is wrong.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
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
    template_copy,
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
from devstack.sandbox.launch import running

RESULT_FILE = ROOT / "var" / "bench" / "restore_listing.json"
RSS_GOAL_MIB = 200.0
TOOL = "bench_listing"
LOST_EVERY = 1000
# The window: lost 30 minutes before the run; the charges in its last 25 minutes.
LOST_FOR, CHARGES_FOR = timedelta(minutes=30), timedelta(minutes=25)


@dataclass(frozen=True)
class Options:
    records: int
    keep_db: bool


def parse_args(argv: list[str]) -> tuple[Options, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records (100000)")
    child_options(parser)
    args = parser.parse_args(argv)
    if args.records < LOST_EVERY:
        parser.error(f"--records must be at least {LOST_EVERY}")
    return options_from(args, Options), args.child


def tools_toml(url: str) -> str:
    return f"""
[tools.{TOOL}]
description = "The restore listing benchmark's payments tool, listed by the payments sandbox."
preset = "idempotent"
has_lookup = true
key_ttl = "24h"
settle_after = "2m"
amount_path = "amount"
currency_path = "currency"
amount_unit = "major"
reconciler = "sandbox_payments"
reconciler_config = {{ base_url = "{url}" }}
"""


def key(n: int) -> str:
    return f"el_listing_{n:010d}" if n % LOST_EVERY else f"lost_{n:010d}"


def fill_provider(store: Path, n: int, now: datetime) -> None:
    """`n` charges in the window, straight into the payments sandbox's store."""
    first = now - CHARGES_FOR
    step = CHARGES_FOR / n
    with sqlite3.connect(store) as db:
        db.executemany(
            "INSERT INTO transactions (id, object, status, amount, currency, account, metadata,"
            " idempotency_key, received_key, reference, fingerprint, created, created_us)"
            " VALUES (?, 'charge', 'succeeded', 1250, 'EUR', 'acct_1', '{}', ?, ?, ?, ?, ?, ?)",
            (
                (f"ch_{i:024d}", key(i), key(i), key(i), f"fp{i}",
                 int((at := first + step * i).timestamp()), int(at.timestamp() * 1e6))
                for i in range(1, n + 1)
            ),
        )  # fmt: skip


def fill_ledger(url: str, n: int, now: datetime) -> None:
    """An effect, confirmed hours before the loss, for every charge but the lost ones."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        agent = conn.execute("SELECT id FROM ledger_agent WHERE name = 'bench'").fetchone()[0]
        conn.execute(
            f"""
            INSERT INTO ledger_effect ({EFFECT_COLUMNS})
            SELECT md5('l' || g)::uuid, %(agent)s, 'lst:' || g, 'run-' || (g / 20), 'step-' || g,
                   g %% 20 + 1, 'action', '{TOOL}', 'acct_1',
                   jsonb_build_object('amount', '12.50', 'currency', 'EUR'),
                   'v1:' || md5(g::text), 'el_listing_' || lpad(g::text, 10, '0'),
                   'confirmed', 1, 3, 'worker-1', NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL,
                   'ch_' || lpad(g::text, 24, '0'), NULL, NULL, '', '', NULL, '{{}}'::jsonb,
                   %(at)s, %(at)s, %(at)s, 4
              FROM generate_series(1::int, %(n)s::int) g WHERE g %% {LOST_EVERY} <> 0
            """,
            {"agent": agent, "n": n, "at": now - timedelta(hours=6)},
        )
        conn.execute("VACUUM ANALYZE ledger_effect")


# --- The child -------------------------------------------------------------------------------


def child_sweep(held: bool) -> dict[str, Any]:
    """Enter restore mode, list the window and account for it; seconds and peak RSS."""
    setup_django(bench_env(os.environ["DATABASE_URL"]))
    from django.utils import timezone

    from ledger.models import Tool
    from ledger.restore import gap, mode
    from reconcilers.providers import adapter_for

    window = mode.begin(
        lost_since=timezone.now() - LOST_FOR, reason="bench", by="system:bench"
    ).window
    tool = Tool.objects.get(name=TOOL)
    start, end = gap.statement_bounds(window, tool)
    before = rss_mib()
    began = time.perf_counter()
    listing = adapter_for(tool).list_window(start, end)
    records = tuple(listing.records) if held else listing.records
    counts = gap.account_for(window, tool, start, end, records)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "peak_rss_mib": rss_mib(), "rss_before_mib": before,
            "complete": listing.complete, "counts": counts}  # fmt: skip


# --- The parent ------------------------------------------------------------------------------


def benchmark(opts: Options) -> int:
    base_url = base_database_url()
    name = bench_database(base_url, "bench_listing")
    copy = f"{name}_held"
    print(f"Restore listing benchmark on {os.cpu_count()} CPUs; database {name}.", flush=True)
    with tempfile.TemporaryDirectory() as directory, running("payments", Path(directory)) as api:
        try:
            began = time.perf_counter()
            now = datetime.now(UTC)
            fill_provider(api.store, opts.records, now)
            tools = Path(directory) / "tools.toml"
            tools.write_text(tools_toml(api.url))
            env, _ = fresh_database(bench_env(base_url), name, tools=tools, agents=["bench"])
            fill_ledger(env["DATABASE_URL"], opts.records, now)
            print(f"  {opts.records:,} charges and their effects in "
                  f"{time.perf_counter() - began:.1f} s", flush=True)  # fmt: skip
            held_env = template_copy(base_url, name, copy)
            streamed = measure_in_child(__file__, env, "streamed")
            held = measure_in_child(__file__, held_env, "held")
        finally:
            drop_quietly(base_url, copy)
            if not opts.keep_db:
                drop_quietly(base_url, name)
    return report(opts, streamed, held)


def report(opts: Options, streamed: dict[str, Any], held: dict[str, Any]) -> int:
    print()
    print_grid(
        ("listing", "records", "seconds", "records/s", "peak RSS MiB", "RSS before"),
        [
            (label, f"{opts.records:,}", f"{r['seconds']:.1f}",
             f"{opts.records / r['seconds']:,.0f}", f"{r['peak_rss_mib']:.0f}",
             f"{r['rss_before_mib']:.0f}")
            for label, r in (("streamed page by page", streamed), ("read whole first", held))
        ],
        right_align=True,
    )  # fmt: skip
    lost = opts.records // LOST_EVERY
    want = {"records": opts.records, "matched": opts.records - lost, "incidents": lost}
    checks = {
        f"{label}: {want}": r["complete"] and r["counts"] == want
        for label, r in (("streamed", streamed), ("held", held))
    }
    ok = streamed["peak_rss_mib"] < RSS_GOAL_MIB
    print()
    print_grid(
        ("goal", "measured", "goal", "met?"),
        [
            ("peak RSS, streamed", f"{streamed['peak_rss_mib']:.0f} MiB",
             f"< {RSS_GOAL_MIB:.0f} MiB", "yes" if ok else "NO"),
            *[(label, "yes" if good else "no", "yes", "yes" if good else "NO")
              for label, good in checks.items()],
        ],
    )  # fmt: skip
    write_result(
        RESULT_FILE,
        {"machine": machine_info(), "options": asdict(opts), "streamed": streamed,
         "held": held, "checks": checks},
    )  # fmt: skip
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    opts, child = parse_args(sys.argv[1:] if argv is None else argv)
    return parent_or_child(
        child, lambda which: child_sweep(which == "held"), lambda: benchmark(opts)
    )


if __name__ == "__main__":
    sys.exit(main())
