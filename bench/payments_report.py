"""What the payment-loop benchmark prints and writes: each contender's rounds summed up into
medians, the targets with pass/miss, the tables, and `var/bench/payments.json`."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.harness import ROOT, code_version
from bench.payments_loops import INTENT, OUTCOME, PROVIDER, Round
from bench.report import machine_info, percentile, print_grid, write_result

RESULT_FILE = ROOT / "var" / "bench" / "payments.json"
PARTIES = ("loop", "server", "provider", "postgres")  # CPU per payment, from /proc
PARTS = (INTENT, PROVIDER, OUTCOME)


@dataclass(frozen=True)
class Target:
    label: str
    baseline: str  # the contender the ledger is divided by
    minimum: float
    aim: float | None = None


@dataclass
class Summary:
    """All rounds of one contender."""

    name: str
    rounds: list[float]  # payments/s of each round
    rate: float | None  # their median
    payments: int
    p50_ms: float | None  # per payment, all rounds' payments together
    p99_ms: float | None
    calls: dict[str, dict[str, float]]  # part → p50/p99 ms as the loop saw it
    server: dict[str, dict[str, float]]  # ledger call → p50/p99 ms inside gunicorn
    cpu_ms_per_payment: dict[str, float]
    other_cpu_percent: float | None  # other work's share of the machine during its rounds
    synchronous_commit: list[str]
    errors: int
    error_samples: list[str] = field(default_factory=list)


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p99": round(percentile(ordered, 0.99), 3),
        "count": len(ordered),
    }


def summarise(name: str, rounds: list[Round], synchronous_commit: list[str]) -> Summary:
    latencies = [ms for r in rounds for ms in r.latencies]
    calls: dict[str, list[float]] = {}
    server: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    for r in rounds:
        for part, values in r.calls.items():
            calls.setdefault(part, []).extend(values)
        for part, values in r.server.items():
            server.setdefault(part, []).extend(values)
        for party, seconds in r.cpu_seconds.items():
            cpu[party] = cpu.get(party, 0.0) + seconds
    attempted = sum(r.attempted for r in rounds)
    capacity = sum(cpu.values())  # every core's time in the rounds, idle included
    rates = [round(r.rate, 1) for r in rounds if r.payments]
    overall = _quantiles(latencies) if latencies else {}
    return Summary(
        name=name,
        rounds=rates,
        rate=statistics.median(rates) if rates else None,
        payments=sum(r.payments for r in rounds),
        p50_ms=overall.get("p50"),
        p99_ms=overall.get("p99"),
        calls={part: _quantiles(v) for part, v in calls.items() if v},
        server={part: _quantiles(v) for part, v in server.items() if v},
        cpu_ms_per_payment={
            party: round(1000 * cpu.get(party, 0.0) / attempted, 3) for party in PARTIES
        }
        if attempted and capacity
        else {},
        other_cpu_percent=round(100 * cpu.get("other", 0.0) / capacity, 1) if capacity else None,
        synchronous_commit=synchronous_commit,
        errors=sum(r.errors for r in rounds),
        error_samples=[s for r in rounds for s in r.error_samples][:5],
    )


def ratio(ledger: Summary, baseline: Summary | None) -> float | None:
    if baseline is None or not ledger.rate or not baseline.rate:
        return None
    return ledger.rate / baseline.rate


def verdicts(summaries: dict[str, Summary], targets: list[Target]) -> list[dict[str, Any]]:
    ledger = summaries["ledger"]
    rows = []
    for t in targets:
        value = ratio(ledger, summaries.get(t.baseline))
        rows.append(
            {
                "target": t.label,
                "ratio": value,
                "minimum": t.minimum,
                "aim": t.aim,
                "passed": None if value is None else value >= t.minimum,
            }
        )
    return rows


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _verdict(passed: bool | None) -> str:
    return {None: "–", True: "pass", False: "MISS"}[passed]


def print_round(number: int, r: Round) -> None:
    p50 = statistics.median(r.latencies) if r.latencies else None
    print(
        f"  round {number} {r.contender}: {_fmt(r.rate)} payments/s, p50 {_fmt(p50, 2)} ms, "
        f"{r.errors} errors",
        flush=True,
    )
    for sample in r.error_samples:
        print(f"    error: {sample}", flush=True)


def print_tables(summaries: dict[str, Summary], targets: list[Target]) -> None:
    ledger = summaries["ledger"]
    goals = {t.baseline: t for t in targets}
    rows = []
    for s in summaries.values():
        value = None if s is ledger else ratio(ledger, s)
        goal = goals.get(s.name)
        rows.append(
            [
                s.name,
                _fmt(s.rate),
                " / ".join(f"{r:g}" for r in s.rounds) or "–",
                _fmt(s.p50_ms, 2),
                _fmt(s.p99_ms, 2),
                ", ".join(s.synchronous_commit) or "?",
                "–" if s is ledger else _fmt(value, 2),
                f"≥ {goal.minimum:g}" + (f" (aim {goal.aim:g})" if goal.aim else "")
                if goal
                else "–",
                _verdict(None if goal is None or value is None else value >= goal.minimum),
                str(s.errors),
            ]
        )
    header = [
        "contender", "payments/s", "per round", "p50 ms", "p99 ms", "synchronous_commit",
        "ledger ÷", "target", "met?", "errors",
    ]  # fmt: skip
    print_grid(header, rows, right_align=True)

    print("\nPer call, ms (loop: as the worker saw it; server: gunicorn's %(D)s):")
    rows = []
    for s in summaries.values():
        for part in PARTS:
            if part in s.calls:
                loop, server = s.calls[part], s.server.get(part, {})
                rows.append(
                    [
                        s.name,
                        part,
                        _fmt(loop["p50"], 2),
                        _fmt(loop["p99"], 2),
                        _fmt(server.get("p50"), 2),
                        _fmt(server.get("p99"), 2),
                    ]
                )
    header = ["contender", "call", "loop p50", "loop p99", "server p50", "server p99"]
    print_grid(header, rows, right_align=True)
    for part, server in ledger.server.items():
        timed = ledger.calls.get(part, {}).get("count", 0)
        if server["count"] != timed:
            print(f"  Note: access-log lines for {server['count']} of {timed} {part} calls.")

    measured = [s for s in summaries.values() if s.cpu_ms_per_payment]
    if measured:
        print("\nCPU ms per payment by party (/proc, warm-up included), other work's share:")
        rows = [
            [
                s.name,
                *(_fmt(s.cpu_ms_per_payment.get(p), 2) for p in PARTIES),
                _fmt(sum(s.cpu_ms_per_payment.values()), 2),
                f"{_fmt(s.other_cpu_percent)}%",
            ]
            for s in measured
        ]
        print_grid(["contender", *PARTIES, "total", "other"], rows, right_align=True)


def print_targets(rows: list[dict[str, Any]]) -> None:
    print("\nTargets (medians of the rounds):")
    for row in rows:
        aim = f", aiming for {row['aim']:g}" if row["aim"] else ""
        print(
            f"  {row['target']}: {_fmt(row['ratio'], 2)} (target ≥ {row['minimum']:g}{aim}) "
            f"— {_verdict(row['passed'])}"
        )


def busy_warning(summaries: dict[str, Summary]) -> str | None:
    busiest = max((s.other_cpu_percent or 0.0 for s in summaries.values()), default=0.0)
    if busiest < 10:
        return None
    return (
        f"Warning: other processes used up to {busiest:g}% of the machine's CPU during the "
        "rounds; rates are depressed (interleaving keeps the ratios fairer)."
    )


def write_json(
    summaries: dict[str, Summary],
    targets: list[dict[str, Any]],
    config: dict[str, Any],
    failures: list[str],
) -> None:
    data = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code": code_version(),
        "machine": machine_info(),
        "config": config,
        "contenders": [asdict(s) for s in summaries.values()],
        "targets": targets,
        "failures": failures,
    }
    write_result(RESULT_FILE, data)
