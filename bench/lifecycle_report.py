"""What the lifecycle benchmark prints and writes."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Any

from bench.harness import ROOT
from bench.lifecycle_load import Measurement, Options, Result, summarise
from bench.report import machine_info, print_grid, write_result

RESULT_FILE = ROOT / "var" / "bench" / "lifecycle.json"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def print_table(results: list[Result]) -> None:
    header = ["name", "per second", "p50 ms", "p99 ms", "ratio", "goal", "met?"]
    rows: list[list[str]] = []
    for r in results:
        met = {None: "–", True: "yes", False: "NO"}[r.met]
        rows.append(
            [
                r.name,
                "skipped" if r.rate is None else f"{r.rate:,.1f} {r.unit}",
                _fmt(r.p50_ms),
                _fmt(r.p99_ms),
                _fmt(r.ratio, 2),
                "–" if r.goal is None else f"≥ {r.goal:g}",
                met if r.goal is not None else ("report" if r.ratio is not None else "–"),
            ]
        )
    print_grid(header, rows, right_align=True)


def print_cpu_table(results: list[Result]) -> None:
    """CPU milliseconds per lifecycle by party: steadier than rates on a shared machine."""
    measured = [r for r in results if r.cpu_ms_per_lifecycle]
    if not measured:
        return
    print(
        "\nCPU ms per lifecycle (DBOS: per 2-step workflow), from /proc; other work's share "
        "of the machine in brackets:"
    )
    width = max(len(r.name) for r in measured)
    print(f"  {'name'.ljust(width)}  server  postgres  load gen   total")
    for r in measured:
        ms = r.cpu_ms_per_lifecycle
        total = sum(ms.values())
        print(
            f"  {r.name.ljust(width)}  {ms.get('server', 0):6.2f}  {ms.get('postgres', 0):8.2f}"
            f"  {ms.get('load generator', 0):8.2f}  {total:6.2f}"
            f"   ({r.cpu_percent.get('other', 0):g}% other)"
        )
    ledger, bare = results[0], results[1]
    if ledger.cpu_ms_per_lifecycle and bare.cpu_ms_per_lifecycle:

        def serving(r: Result) -> float:
            return r.cpu_ms_per_lifecycle.get("server", 0) + r.cpu_ms_per_lifecycle.get(
                "postgres", 0
            )

        if serving(ledger):
            print(
                f"  By CPU cost (server + PostgreSQL), ledger ÷ A = "
                f"{serving(bare) / serving(ledger):.2f}."
            )


def print_round(name: str, unit: str, m: Measurement, per_lifecycle: int = 1) -> None:
    result = summarise(name, unit, [m], per_lifecycle=per_lifecycle)
    print(
        f"  {name}: {_fmt(result.rate)} {unit}/s, p50 {_fmt(result.p50_ms)} ms, "
        f"p99 {_fmt(result.p99_ms)} ms, {result.errors} errors",
        flush=True,
    )
    if result.cpu_percent:
        split = ", ".join(f"{k} {v:g}%" for k, v in result.cpu_percent.items())
        per = ", ".join(f"{k} {v:g}" for k, v in result.cpu_ms_per_lifecycle.items() if v)
        print(f"    CPU of all cores: {split}; CPU ms per lifecycle: {per}", flush=True)
    for sample in result.error_samples:
        print(f"    error: {sample}", flush=True)


def machine_note() -> str:
    cores = os.cpu_count() or 0
    return (
        f"{cores} cores; load generator, server and PostgreSQL share them, so every "
        f"figure is bounded by {cores} cores of CPU"
    )


def busy_warning(results: list[Result]) -> str | None:
    busiest = max((r.cpu_percent.get("other", 0.0) for r in results), default=0.0)
    if busiest < 10:
        return None
    return (
        f"Warning: other processes used up to {busiest:g}% of the machine's CPU during the "
        "measurements; absolute rates are depressed (the interleaved rounds keep ratios fairer)."
    )


def write_json(
    results: list[Result], opts: Options, server_label: str, writes: dict[str, Any]
) -> None:
    data = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {**machine_info(), "note": machine_note()},
        "config": {
            "clients": opts.clients,
            "rounds": opts.rounds,
            "warmup_s": opts.warmup,
            "duration_s_per_round": opts.duration,
            "server": server_label,
            "client": f"stdlib http.client, keep-alive, one connection per client thread, "
            f"{opts.client_processes} process(es)",
        },
        "results": [{**asdict(r), "met": r.met} for r in results],
        "rows_written": writes,
    }
    write_result(RESULT_FILE, data)


WRITES_SQL = """
    SELECT a.name, count(*) AS effects,
           count(*) FILTER (WHERE e.status = 'confirmed') AS confirmed,
           sum((SELECT count(*) FROM ledger_effectevent v WHERE v.effect_id = e.id)) AS events,
           (SELECT count(*) FROM ledger_run r WHERE r.agent_id = a.id) AS runs
      FROM ledger_agent a JOIN ledger_effect e ON e.agent_id = a.id
     GROUP BY a.id, a.name ORDER BY a.name
"""


def writes_check(url: str) -> dict[str, dict[str, float]]:
    """Rows each agent left: the ledger's and the baselines' writes must match per lifecycle."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(WRITES_SQL).fetchall()
    return {
        name: {
            "effects": int(effects),
            "confirmed": int(confirmed),
            "runs": int(runs),
            "events_per_effect": round(int(events) / effects, 3) if effects else 0.0,
        }
        for name, effects, confirmed, events, runs in rows
    }


def print_writes(writes: dict[str, dict[str, float]]) -> None:
    print("\nRows written (agent 'bench': the ledger; 'bench-baseline': A and B):")
    for name, w in writes.items():
        print(
            f"  {name}: {w['effects']:.0f} effects ({w['confirmed']:.0f} confirmed), "
            f"{w['events_per_effect']:g} events per effect, {w['runs']:.0f} runs"
        )
    per_effect = {w["events_per_effect"] for w in writes.values()}
    if len(per_effect) > 1:
        print(
            "  Warning: the ledger and the baseline did not write the same events per "
            "lifecycle: the baseline's SQL needs updating (bench/baseline_wsgi.py)."
        )
