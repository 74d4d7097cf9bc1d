"""The operator pages benchmark's results: percentiles per page, the table, the queries each
page ran, and the result file."""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.cpu import CLOCK_TICKS
from bench.harness import ROOT, code_version
from bench.pages_measure import Captured, Machine, PageKind, Samples
from bench.report import machine_info, percentile, print_grid, write_result

RESULT_FILE = ROOT / "var" / "bench" / "pages.json"
GOAL_MS = 150.0  # p95 server time of every page measured


@dataclass
class Result:
    page: str
    requests: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    sql_p50_ms: float  # waiting for PostgreSQL, inside the request
    cpu_p50_ms: float  # this process's CPU (Django, ORM, templates)
    cpu_p95_ms: float
    pg_cpu_ms: float  # the PostgreSQL backend's CPU, mean per request
    raw_p50_ms: float
    raw_p95_ms: float
    ratio: float  # page p50 ÷ raw p50
    queries: str
    kb: float
    goal: bool
    errors: list[str]

    @property
    def met(self) -> bool | None:
        return self.p95_ms < GOAL_MS if self.goal else None

    @property
    def cpu_estimate_ms(self) -> float:
        """What the p95 request costs in CPU, Django and PostgreSQL together: about its wall
        time on an otherwise idle machine."""
        return self.cpu_p95_ms + self.pg_cpu_ms


def summarise(kind: PageKind, s: Samples, captured: Captured) -> Result:
    page, raw, cpu = sorted(s.page_ms), sorted(s.raw_ms), sorted(s.cpu_ms)
    low, high = min(captured.queries), max(captured.queries)
    return Result(
        page=kind.name,
        requests=len(page),
        p50_ms=statistics.median(page),
        p95_ms=percentile(page, 0.95),
        max_ms=page[-1],
        sql_p50_ms=statistics.median(s.sql_ms),
        cpu_p50_ms=statistics.median(cpu),
        cpu_p95_ms=percentile(cpu, 0.95),
        pg_cpu_ms=1000 * s.pg_ticks / CLOCK_TICKS / len(page),
        raw_p50_ms=statistics.median(raw),
        raw_p95_ms=percentile(raw, 0.95),
        ratio=statistics.median(page) / statistics.median(raw),
        queries=str(low) if low == high else f"{low}–{high}",
        kb=statistics.median(s.bytes) / 1024,
        goal=kind.goal,
        errors=s.errors[:5],
    )


def print_results(results: list[Result], machine: Machine) -> None:
    rows = [
        (
            r.page,
            f"{r.p50_ms:.1f}",
            f"{r.p95_ms:.1f}",
            f"{r.max_ms:.1f}",
            f"{r.sql_p50_ms:.1f}",
            f"{r.cpu_p50_ms:.1f}",
            f"{r.cpu_p95_ms:.1f}",
            f"{r.pg_cpu_ms:.1f}",
            r.queries,
            f"{r.raw_p50_ms:.2f}",
            f"{r.ratio:.1f}×",
            f"{r.kb:.0f}",
            f"< {GOAL_MS:g}" if r.goal else "reported",
            "–" if r.met is None else ("yes" if r.met else "NO"),
            "–" if not r.goal else ("yes" if r.cpu_estimate_ms < GOAL_MS else "NO"),
        )
        for r in results
    ]
    print()
    print_grid(
        (
            "page",
            "p50 ms",
            "p95 ms",
            "max ms",
            "SQL p50",
            "CPU p50",
            "CPU p95",
            "PG CPU",
            "queries",
            "raw p50",
            "page÷raw",
            "KB",
            "goal p95",
            "met?",
            "by CPU?",
        ),
        rows,
        right_align=True,
    )
    print(
        "\np50/p95/max: server time of the whole request in-process (test Client). SQL p50: "
        "the part of it spent waiting for PostgreSQL. CPU p50/p95: this process's CPU per "
        "request (Django, ORM, templates); PG CPU: its PostgreSQL backend's, mean per request. "
        "raw p50: the page's main query on raw psycopg; page÷raw: ratio of the medians. "
        "by CPU?: CPU p95 + PG CPU < goal, i.e. the goal met on an otherwise idle machine."
    )
    other = max(machine.busy - machine.ours, 0.0)
    print(
        f"\nThe machine during the {machine.seconds:.0f} s measured: {100 * machine.busy:.0f}% "
        f"busy, {100 * machine.ours:.0f}% of it this benchmark (one thread and its backends), "
        f"{100 * other:.0f}% other processes."
    )
    if other > 0.1:
        print(
            "  warning: other work competed for the CPUs; wall times are longer than on a "
            "quiet machine (the CPU columns are steadier)."
        )


def print_queries(kinds: list[PageKind], captured: dict[str, Captured]) -> None:
    print("\nQueries per request (CaptureQueriesContext, untimed pass) and the slowest ones:")
    for kind in kinds:
        c = captured[kind.name]
        shown = f"; says {c.items} items" if c.items else ""
        print(f"  {kind.name}: {c.queries} queries, {c.rows} table rows rendered{shown}")
        for ms, sql in c.slowest:
            print(f"      {ms:7.2f} ms  {shape(sql)}")


def shape(sql: str, width: int = 150) -> str:
    text = re.sub(r"\s+", " ", sql).strip()
    return text if len(text) <= width else text[: width - 1] + "…"


def write_report(
    options: dict[str, Any],
    results: list[Result],
    machine: Machine,
    dataset: dict[str, Any],
    build_seconds: dict[str, float],
    captured: dict[str, Captured],
    plans: dict[str, list[str]],
    background: dict[str, Any],
) -> None:
    data = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code": code_version(),
        "machine": machine_info(),
        "options": options,
        "goal_p95_ms": GOAL_MS,
        "dataset": dataset,
        "build_seconds": build_seconds,
        "machine_during_measurement": asdict(machine),
        "background": background,
        "results": [
            {**asdict(r), "met": r.met, "cpu_estimate_ms": r.cpu_estimate_ms} for r in results
        ],
        "queries": {name: asdict(c) for name, c in captured.items()},
        "explain": plans,
    }
    write_result(RESULT_FILE, data)
