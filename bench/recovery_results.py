"""The recovery benchmark's options, and its report: measured rows, correctness checks, the
table and the result file."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.harness import ROOT, code_version
from bench.report import machine_info, print_grid, write_result

RESULT_FILE = ROOT / "var" / "bench" / "recovery.json"


@dataclass(frozen=True)
class Options:
    effects: int
    workers: int
    jobs: str
    drain_limit: int
    timeout: float
    profile_effects: int
    total: int
    stale: int
    repeats: int
    explain: bool
    keep_db: bool
    skip_recovery: bool
    skip_escalation: bool


@dataclass
class Row:
    measurement: str
    value: float | None
    unit: str
    goal: str = "reported"
    met: bool | None = None  # None: no goal


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks[name] = ok
        print(f"  [{'ok' if ok else 'FAILED'}] {name}{f': {detail}' if detail else ''}")
        return ok

    @property
    def correct(self) -> bool:
        return all(self.checks.values())


def _value(row: Row) -> str:
    if row.value is None:
        return "–"
    if row.unit == "s":
        return f"{row.value:.3f} s" if row.value < 10 else f"{row.value:.1f} s"
    if row.unit == "ms":
        return f"{row.value:.2f} ms"
    if row.unit == "×":
        return f"{row.value:.2f}×"
    return f"{row.value:.0f}{row.unit}"


def print_table(report: Report) -> None:
    rows = [
        (r.measurement, _value(r), r.goal, "–" if r.met is None else ("yes" if r.met else "NO"))
        for r in report.rows
    ]
    rows.append(
        (
            "correctness checks",
            f"{sum(report.checks.values())}/{len(report.checks)}",
            "all pass",
            "yes" if report.correct else "NO",
        )
    )
    print()
    print_grid(("measurement", "value", "goal", "met?"), rows)


def write_report(report: Report, opts: Options) -> None:
    write_result(
        RESULT_FILE,
        {
            "code": code_version(),
            "machine": machine_info(),
            "options": asdict(opts),
            "rows": [asdict(r) for r in report.rows],
            "checks": report.checks,
            "correct": report.correct,
            "details": report.details,
        },
    )
