"""Importing Stripe's itemized balance change report of 1,000,000 lines, against the ledger's own
statement format in the same run: lines per second of the whole import, and peak memory.

The database and the ledger's own statement file are those of `statements.py` (1,000,000
effects of one tool dispatched during one past day, 2 % of them in doubt; a line for every
effect but one in 5,000, and as many orphans). The Stripe report says the same in Stripe's
shape (`reconcilers.providers.stripe.report`): the columns the ledger's fetch asks for, one
balance transaction per line, the effect's provider ref as `payment_intent_id`, its key as
`payment_metadata[ledger_key]`, gross, fee and net in major units, `created_utc` to the
second, and, as a real day has, a payout line every 10,000 lines (which the reader skips).

The filled database is kept as a template; each measurement imports into a fresh copy of it
(`CREATE DATABASE … TEMPLATE`), in a child process of its own so that its peak RSS
(`ru_maxrss`) is the import's alone: the ledger's format, then Stripe's, `--rounds` times,
interleaved; the importing process's CPU time is read beside the rates (it barely moves when
the machine is busy; the database server's share is the same for both). Afterwards every count
is checked, as in `statements.py`. Goals: Stripe's report at ≥ 0.8 × the ledger's own format's
lines per second (medians), under 200 MiB peak RSS.

Database `…_bench_stripe` and its copies (`bench.children`); the table also goes to
`var/bench/stripe_report.json`; exit status 1 only when a count is wrong.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.children import (
    base_database_url,
    child_options,
    measure_in_child,
    parent_or_child,
    template_copy,
)
from bench.harness import ROOT, bench_database, bench_env, drop_quietly, options_from, setup_django
from bench.report import machine_info, print_grid, write_result
from bench.statements import TOOL, check_lines, expected, filled_database, import_day

RESULT_FILE = ROOT / "var" / "bench" / "stripe_report.json"
WORK = ROOT / "var" / "bench" / "stripe_report"
RATIO_GOAL = 0.8
RSS_GOAL_MIB = 200.0
PAYOUT_EVERY = 10_000


@dataclass(frozen=True)
class Options:
    lines: int
    rounds: int
    keep_db: bool


def parse_args(argv: list[str]) -> tuple[Options, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines (1000000)")
    parser.add_argument("--rounds", type=int, default=2, help="imports of each format (2)")
    child_options(parser)
    args = parser.parse_args(argv)
    check_lines(parser, args.lines)
    return options_from(args, Options), args.child


# --- The Stripe report of the same day -------------------------------------------------------


def _charge(n: int, created: str, currency: str, amount: str, ref: str, key: str) -> list[str]:
    net = f"{float(amount) - 0.66:.2f}"
    txn, charge = f"txn_{n:024d}", f"ch_{n:024d}"
    kept = (txn, created, created, currency, amount, "0.66", net, "charge", charge)
    return [*kept, "Payment for an agent's order", charge, ref, key, ""]


def _payout(n: int, created: str, currency: str) -> list[str]:
    kept = (f"txn_po_{n:021d}", created, created, currency, "-9000.00", "0.00", "-9000.00")
    return [*kept, "payout", f"po_{n:024d}", "STRIPE PAYOUT", "", "", "", ""]


def stripe_report(own: Path, path: Path) -> int:
    """The ledger's statement `own` rewritten as Stripe's itemized balance change report, with
    the fetch's columns; returns its lines (payouts included). In a child (Django set up)."""
    setup_django(bench_env(os.environ["DATABASE_URL"]))
    from reconcilers.providers.stripe.reporting import COLUMNS

    written = 0
    with own.open(newline="") as source, path.open("w", newline="") as out:
        lines = csv.reader(source)
        at = {name: i for i, name in enumerate(next(lines))}
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for n, row in enumerate(lines, start=1):
            created = row[at["occurred_at"]][:19].replace("T", " ")
            currency = row[at["currency"]].lower()
            ref, key, amount = row[at["provider_ref"]], row[at["reference"]], row[at["amount"]]
            writer.writerow(_charge(n, created, currency, amount, ref, key))
            written += 1
            if n % PAYOUT_EVERY == 0:
                writer.writerow(_payout(n, created, currency))
                written += 1
    return written


# --- The children ----------------------------------------------------------------------------


def child_import(which: str, path: Path) -> dict[str, Any]:
    """One import of `path` into this child's database copy: the ledger's own format, or
    Stripe's report (the tool then reads statements in it)."""
    setup_django(bench_env(os.environ["DATABASE_URL"]))
    from ledger.models import Tool
    from ledger.statements.formats import register
    from reconcilers.providers.stripe.report import NAME, REPORT

    if which == "stripe":
        register(REPORT)
        Tool.objects.filter(name=TOOL).update(statement_format=NAME)
    return import_day(path)


def measure(env: dict[str, str], which: str, *paths: Path) -> dict[str, Any]:
    return measure_in_child(__file__, env, ":".join([which, *map(str, paths)]))


# --- The parent ------------------------------------------------------------------------------


def benchmark(opts: Options) -> int:
    base_url = base_database_url()
    name = bench_database(base_url, "bench_stripe")
    copy = f"{name}_run"
    print(f"Stripe report import benchmark on {os.cpu_count()} CPUs; database {name}.", flush=True)
    WORK.mkdir(parents=True, exist_ok=True)
    own, stripe = WORK / f"statement-{opts.lines}.csv", WORK / f"stripe-{opts.lines}.csv"
    runs: dict[str, list[dict[str, Any]]] = {"ledger": [], "stripe": []}
    try:
        began = time.perf_counter()
        env = filled_database(base_url, name, opts.lines, own)
        stripe_lines = measure(env, "write", own, stripe)["lines"]
        took = time.perf_counter() - began
        print(
            f"  {opts.lines:,} effects, the ledger's file and Stripe's report "
            f"({stripe_lines:,} lines) in {took:.1f} s",
            flush=True,
        )
        for n in range(opts.rounds):
            for which, path in (("ledger", own), ("stripe", stripe)):
                result = measure(template_copy(base_url, name, copy), which, path)
                runs[which].append(result)
                print(f"  round {n + 1} {which}: {result['seconds']:.1f} s, "
                      f"{result['peak_rss_mib']:.0f} MiB", flush=True)  # fmt: skip
    finally:
        own.unlink(missing_ok=True)
        stripe.unlink(missing_ok=True)
        drop_quietly(base_url, copy)
        if not opts.keep_db:
            drop_quietly(base_url, name)
    return report(opts, runs, stripe_lines)


def report(opts: Options, runs: dict[str, list[dict[str, Any]]], stripe_lines: int) -> int:
    # The same lines imported from both (the report's payout lines are read and skipped).
    lines = {"ledger": opts.lines, "stripe": opts.lines}
    rate = {w: statistics.median(lines[w] / r["seconds"] for r in rs) for w, rs in runs.items()}
    peak = {w: max(r["peak_rss_mib"] for r in rs) for w, rs in runs.items()}
    ratio = rate["stripe"] / rate["ledger"]
    # The importing process's own CPU (parsing, checking, COPY's client side): what the format
    # costs, and what a busy machine barely moves; the database server's work is the same.
    cpu = {w: statistics.median(r["cpu_seconds"] for r in rs) for w, rs in runs.items()}
    cpu_ratio = cpu["ledger"] / cpu["stripe"]
    print()
    extra = {"ledger": "", "stripe": f" (+{stripe_lines - opts.lines} payouts)"}
    print_grid(
        ("format", "lines", "seconds (each round)", "lines/s (median)", "client CPU s",
         "peak RSS MiB"),
        [
            (which, f"{lines[which]:,}{extra[which]}",
             " ".join(f"{r['seconds']:.1f}" for r in rs), f"{rate[which]:,.0f}",
             f"{cpu[which]:.1f}", f"{peak[which]:.0f}")
            for which, rs in runs.items()
        ],
        right_align=True,
    )  # fmt: skip
    want = expected(opts.lines)
    checks = {
        f"{which} round {n + 1}: {k} = {v:,}": r["counts"].get(k) == v
        for which, rs in runs.items()
        for n, r in enumerate(rs)
        for k, v in want.items()
    }
    checks.update({f"{w} imports finished": all(r["phase"] == "done" for r in rs)
                   for w, rs in runs.items()})  # fmt: skip
    print()
    print_grid(
        ("goal", "measured", "goal", "met?"),
        [
            ("Stripe ÷ ledger lines/s", f"{ratio:.2f}", f">= {RATIO_GOAL}",
             "yes" if ratio >= RATIO_GOAL else "NO"),
            ("Stripe ÷ ledger, by client CPU", f"{cpu_ratio:.2f}", "reported", ""),
            ("peak RSS, Stripe's report", f"{peak['stripe']:.0f} MiB", f"< {RSS_GOAL_MIB:.0f} MiB",
             "yes" if peak["stripe"] < RSS_GOAL_MIB else "NO"),
            ("every count as expected", "yes" if all(checks.values()) else "no", "yes",
             "yes" if all(checks.values()) else "NO"),
        ],
    )  # fmt: skip
    for label, ok in checks.items():
        if not ok:
            print(f"  wrong: {label}")
    write_result(
        RESULT_FILE,
        {"machine": machine_info(), "options": asdict(opts), "runs": runs, "ratio": ratio,
         "cpu_ratio": cpu_ratio,
         "lines_per_second": rate, "peak_rss_mib": peak, "checks": checks},
    )  # fmt: skip
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    opts, child = parse_args(sys.argv[1:] if argv is None else argv)
    return parent_or_child(child, in_child, lambda: benchmark(opts))


def in_child(what: str) -> dict[str, Any]:
    which, *paths = what.split(":")
    if which == "write":
        return {"lines": stripe_report(Path(paths[0]), Path(paths[1]))}
    return child_import(which, Path(paths[0]))


if __name__ == "__main__":
    sys.exit(main())
