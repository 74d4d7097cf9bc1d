"""Restore mode's sweep of a lost window holding 100,000 provider records: the provider's listing
streamed page by page into the sweep (`reconcilers.gapsweep`), seconds and peak memory, through
the `sandbox_payments` adapter and through the Stripe adapter.

The payments sandbox (a real process) holds `--records` records created in the lost window,
written straight into its store: charges for the `sandbox_payments` adapter, PaymentIntents in
the shapes its Stripe face serves for the `stripe` adapter (`bench.restore_listing_stripe`).
The ledger holds an effect for each but one in 1,000 (the records whose intent the window
lost). A child process enters restore mode, lists the window through the tool's adapter (pages
of 100 by creation range and `starting_after`) and hands the listing to
`ledger.restore.gap.account_for`, which stores and matches it 1,000 records at a time in one
transaction and raises an incident for every record no effect explains; its peak RSS
(`ru_maxrss`) is the sweep's alone, reported beside its CPU time, the CPU time the sandbox's
process spent answering it and the load average. For comparison, the same sweep with the
listing read whole first (`tuple(records)`, as before the listing was streamed) runs on a
fresh copy of the database. Every count is checked. Goal: the streamed sweep under 200 MiB,
through each adapter.

`--provider` measures one adapter; by default both, one after the other, each in a database
of its own (`…_bench_listing`, `…_bench_listing_stripe`) and a copy (`bench.children`); the
table also goes to `var/bench/restore_listing.json`; exit status 1 only when a count is wrong.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import restore_listing_stripe
from bench.children import (
    base_database_url,
    child_options,
    measure_in_child,
    parent_or_child,
    rss_mib,
    template_copy,
)
from bench.cpu import CLOCK_TICKS, ticks_of
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
# The window: lost 30 minutes before the run; the records in its last 25 minutes.
LOST_FOR, CHARGES_FOR = timedelta(minutes=30), timedelta(minutes=25)


@dataclass(frozen=True)
class Options:
    records: int
    provider: str | None
    keep_db: bool


def parse_args(argv: list[str]) -> tuple[Options, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records (100000)")
    parser.add_argument(
        "--provider", choices=sorted(PROVIDERS), help="one adapter (default: both, in turn)"
    )
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


def fill_stripe(store: Path, n: int, now: datetime) -> None:
    """`n` PaymentIntents in the window, straight into the Stripe face's table."""
    restore_listing_stripe.fill_provider(store, n, now, key, CHARGES_FOR)


@dataclass(frozen=True)
class Provider:
    """An adapter the sweep lists through: its tool, the sandbox's records it lists, and the
    provider ref the ledger's effects hold for them (the prefix, then the record's number)."""

    tool: str
    suffix: str  # of the database: `<db>_<suffix>`, its copy `<db>_<suffix>_held`
    records: str
    tools_toml: Callable[[str], str]
    fill: Callable[[Path, int, datetime], None]
    ref_prefix: str
    env: dict[str, str] = field(default_factory=dict)  # the child's, beside the database's


PROVIDERS = {
    "sandbox_payments": Provider(TOOL, "bench_listing", "charges", tools_toml, fill_provider,
                                 "ch_"),
    "stripe": Provider(restore_listing_stripe.TOOL, "bench_listing_stripe", "PaymentIntents",
                       restore_listing_stripe.tools_toml, fill_stripe,
                       restore_listing_stripe.REF_PREFIX, restore_listing_stripe.ENV),
}  # fmt: skip


def fill_ledger(url: str, n: int, now: datetime, provider: Provider) -> None:
    """An effect, confirmed hours before the loss, for every record but the lost ones."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        agent = conn.execute("SELECT id FROM ledger_agent WHERE name = 'bench'").fetchone()[0]
        conn.execute(
            f"""
            INSERT INTO ledger_effect ({EFFECT_COLUMNS})
            SELECT md5('l' || g)::uuid, %(agent)s, 'lst:' || g, 'run-' || (g / 20), 'step-' || g,
                   g %% 20 + 1, 'action', %(tool)s, 'acct_1',
                   jsonb_build_object('amount', '12.50', 'currency', 'EUR'),
                   'v1:' || md5(g::text), 'el_listing_' || lpad(g::text, 10, '0'),
                   'confirmed', 1, 3, 'worker-1', NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL,
                   %(ref)s || lpad(g::text, 24, '0'), NULL, NULL, '', '', NULL, '{{}}'::jsonb,
                   %(at)s, %(at)s, %(at)s, 4
              FROM generate_series(1::int, %(n)s::int) g WHERE g %% {LOST_EVERY} <> 0
            """,
            {"agent": agent, "n": n, "at": now - timedelta(hours=6), "tool": provider.tool,
             "ref": provider.ref_prefix},
        )  # fmt: skip
        conn.execute("VACUUM ANALYZE ledger_effect")


# --- The child -------------------------------------------------------------------------------


def child_sweep(tool_name: str, held: bool) -> dict[str, Any]:
    """Enter restore mode, list the window and account for it; seconds and peak RSS."""
    setup_django(bench_env(os.environ["DATABASE_URL"]))
    from django.utils import timezone

    from ledger.models import Tool
    from ledger.restore import gap, mode
    from reconcilers.providers import adapter_for

    window = mode.begin(
        lost_since=timezone.now() - LOST_FOR, reason="bench", by="system:bench"
    ).window
    tool = Tool.objects.get(name=tool_name)
    start, end = gap.statement_bounds(window, tool)
    before = rss_mib()
    began, cpu = time.perf_counter(), time.process_time()
    listing = adapter_for(tool).list_window(start, end)
    records = tuple(listing.records) if held else listing.records
    counts = gap.account_for(window, tool, start, end, records)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {"seconds": seconds, "cpu_s": cpu, "peak_rss_mib": rss_mib(),
            "rss_before_mib": before, "complete": listing.complete, "detail": listing.detail,
            "counts": counts}  # fmt: skip


def in_child(what: str) -> dict[str, Any]:
    """`what`: the provider and the listing, `stripe:held`."""
    name, _, listing = what.partition(":")
    return child_sweep(PROVIDERS[name].tool, listing == "held")


# --- The parent ------------------------------------------------------------------------------


def benchmark(opts: Options) -> int:
    base_url = base_database_url()
    names = [opts.provider] if opts.provider else list(PROVIDERS)
    print(f"Restore listing benchmark on {os.cpu_count()} CPUs: {', '.join(names)}.", flush=True)
    results = {name: measure(opts, base_url, name) for name in names}
    return report(opts, results)


def measure(opts: Options, base_url: str, name: str) -> dict[str, Any]:
    """One adapter's streamed and held sweeps, each in a database of its own."""
    provider = PROVIDERS[name]
    db = bench_database(base_url, provider.suffix)
    copy = f"{db}_held"
    print(f"{name}: database {db}.", flush=True)
    with tempfile.TemporaryDirectory() as directory, running("payments", Path(directory)) as api:
        try:
            began = time.perf_counter()
            now = datetime.now(UTC)
            provider.fill(api.store, opts.records, now)
            tools = Path(directory) / "tools.toml"
            tools.write_text(provider.tools_toml(api.url))
            env, _ = fresh_database(bench_env(base_url), db, tools=tools, agents=["bench"])
            fill_ledger(env["DATABASE_URL"], opts.records, now, provider)
            print(f"  {opts.records:,} {provider.records} and their effects in "
                  f"{time.perf_counter() - began:.1f} s", flush=True)  # fmt: skip
            held_env = template_copy(base_url, db, copy)
            streamed = sweep({**env, **provider.env}, f"{name}:streamed", api.pid)
            held = sweep({**held_env, **provider.env}, f"{name}:held", api.pid)
        finally:
            drop_quietly(base_url, copy)
            if not opts.keep_db:
                drop_quietly(base_url, db)
    return {"streamed": streamed, "held": held}


def sweep(env: dict[str, str], what: str, sandbox: int | None) -> dict[str, Any]:
    """One sweep in a child, with the CPU seconds the sandbox spent answering it and the
    machine's load averages when it ended."""
    before = ticks_of(sandbox) if sandbox else 0
    result = measure_in_child(__file__, env, what)
    result["sandbox_cpu_s"] = (ticks_of(sandbox) - before) / CLOCK_TICKS if sandbox else None
    result["load"] = os.getloadavg()
    return result


def report(opts: Options, results: dict[str, dict[str, Any]]) -> int:
    print()
    print_grid(
        ("adapter", "listing", "records", "seconds", "records/s", "peak RSS MiB", "RSS before",
         "sweep CPU s", "sandbox CPU s", "load 1 min"),
        [
            (name, label, f"{opts.records:,}", f"{r['seconds']:.1f}",
             f"{opts.records / r['seconds']:,.0f}", f"{r['peak_rss_mib']:.0f}",
             f"{r['rss_before_mib']:.0f}", f"{r['cpu_s']:.1f}",
             f"{r['sandbox_cpu_s'] or 0:.1f}", f"{r['load'][0]:.1f}")
            for name, result in results.items()
            for label, r in (("streamed page by page", result["streamed"]),
                             ("read whole first", result["held"]))
        ],
        right_align=True,
    )  # fmt: skip
    lost = opts.records // LOST_EVERY
    want = {"records": opts.records, "matched": opts.records - lost, "incidents": lost}
    for result in results.values():
        result["checks"] = {
            f"{label}: {want}": r["complete"] and r["counts"] == want
            for label, r in (("streamed", result["streamed"]), ("held", result["held"]))
        }
    print()
    print_grid(("adapter", "goal", "measured", "goal", "met?"), goal_rows(results))
    write_result(
        RESULT_FILE,
        {"machine": machine_info(), "options": asdict(opts), "want": want, **results},
    )  # fmt: skip
    good = [ok for result in results.values() for ok in result["checks"].values()]
    return 0 if all(good) else 1


def goal_rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    for name, result in results.items():
        peak = result["streamed"]["peak_rss_mib"]
        ok = peak < RSS_GOAL_MIB
        rows.append((name, "peak RSS, streamed", f"{peak:.0f} MiB", f"< {RSS_GOAL_MIB:.0f} MiB",
                     "yes" if ok else "NO"))  # fmt: skip
        rows += [
            (name, label, "yes" if good else "no", "yes", "yes" if good else "NO")
            for label, good in result["checks"].items()
        ]
    return rows


def main(argv: list[str] | None = None) -> int:
    opts, child = parse_args(sys.argv[1:] if argv is None else argv)
    return parent_or_child(child, in_child, lambda: benchmark(opts))


if __name__ == "__main__":
    sys.exit(main())
