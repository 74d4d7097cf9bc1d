"""The escalation sweep over a million effects: `reviews.alerts.escalation.escalate()` against
the raw SQL of the same selection and insert, in the same rounds."""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench.harness import EFFECT_COLUMNS, sql_exec, sql_rows
from bench.recovery_results import Options, Report, Row
from bench.recovery_seed import REQUEST

ESCALATION_GOAL = 1.0  # seconds for one escalation sweep over 1M effects


def fill_to(total: int, stale: int, agent_id: int) -> int:
    """Add effects until the table holds `total`, in creation order as a real table fills up:
    60 days of history, mostly confirmed. Among the rows older than 25 h, `stale` evenly
    spread ones are non-terminal (planned, dispatching, awaiting_confirmation, unknown); among
    the last day's rows, every other one is. Ids, keys and runs grow with creation time (like
    time-ordered UUIDs), which keeps generating a million rows to seconds. Returns how many
    rows were added."""
    existing = sql_rows("SELECT count(*) FROM ledger_effect")[0][0]
    add = total - existing
    old = add - add // 60  # rows created before the last day
    if old < stale:
        raise RuntimeError(f"the table already holds {existing} effects; cannot add {stale} stale")
    sql_exec(
        f"""
        INSERT INTO ledger_effect ({EFFECT_COLUMNS})
        SELECT (lpad(to_hex(g), 12, '0') || left(md5(g::text), 20))::uuid, %(agent)s,
               'esc:' || lpad(g::text, 8, '0'), 'esc-' || lpad((g / 20)::text, 7, '0'),
               'step-' || g, g %% 20 + 1, 'action',
               (ARRAY['charge_card', 'refund_card', 'get_balance', 'create_ticket',
                      'send_email'])[g %% 5 + 1],
               'acct_' || (g %% 977), %(request)s::jsonb, 'v1:' || md5(g::text),
               'el_' || lpad(to_hex(g), 8, '0') || left(md5('k' || g), 24), x.status, 1, 3,
               'bench-agent', NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL,
               CASE WHEN x.status = 'confirmed' THEN 'ch_' || left(md5('c' || g), 24) ELSE '' END,
               NULL, NULL, '', '', NULL, '{{}}'::jsonb, x.created_at, x.created_at,
               CASE WHEN x.status = 'confirmed' THEN x.created_at + interval '2 seconds' END,
               CASE WHEN x.status = 'confirmed' THEN 3 ELSE 2 END
          FROM generate_series(1, %(add)s) g
          CROSS JOIN LATERAL (
              SELECT CASE
                       WHEN g <= %(old)s AND g %% %(step)s = 0 AND g / %(step)s <= %(stale)s
                       THEN (ARRAY['planned', 'dispatching', 'awaiting_confirmation',
                                   'unknown'])[(g / %(step)s) %% 4 + 1]
                       WHEN g > %(old)s AND g %% 2 = 0
                       THEN (ARRAY['planned', 'dispatching', 'awaiting_confirmation',
                                   'unknown'])[(g / 2) %% 4 + 1]
                       ELSE 'confirmed' END AS status,
                     CASE
                       WHEN g <= %(old)s
                       THEN now() - interval '60 days'
                            + (g::float8 / %(old)s) * (interval '60 days' - interval '25 hours')
                       ELSE now() - interval '23 hours'
                            + ((g - %(old)s)::float8 / (%(add)s - %(old)s))
                              * interval '22 hours 59 minutes' END AS created_at
          ) x
        """,
        {
            "agent": agent_id,
            "request": json.dumps(REQUEST),
            "add": add,
            "old": old,
            "stale": stale,
            "step": old // stale,
        },
    )
    return add


def capture_escalation_sql() -> tuple[str, Any]:
    """The statement `escalate()` runs, with its parameters (run once and rolled back)."""
    from django.db import connection, transaction

    from reviews.alerts.escalation import escalate

    captured: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with contextlib.suppress(_Rollback), transaction.atomic():
        with connection.execute_wrapper(capture):
            escalate()
        raise _Rollback
    return captured[-1]


class _Rollback(Exception):
    pass


RAW_SELECT = (
    "SELECT id FROM ledger_effect WHERE status IN ('planned', 'dispatching', "
    "'awaiting_confirmation', 'unknown') AND created_at < now() - interval '24 hours'"
)


RAW_INSERT = (
    "INSERT INTO reviews_reviewitem (effect_id, reason, opened_at, due_at, resolution) "
    "SELECT id, 'unresolved_past_window', now(), now() + interval '7 days', '' FROM ("
    + RAW_SELECT
    + ") s ON CONFLICT (effect_id) WHERE resolved_at IS NULL DO NOTHING"
)


def selection_of(statement: str) -> str:
    """The escalation statement as a plain SELECT of the rows it would insert: the `INSERT
    INTO …` line and the `ON CONFLICT` clause cut off, whatever precedes them (a CTE) kept."""
    head, found, insert = statement.partition("INSERT INTO")
    if not found:
        raise ValueError("the escalation statement has no INSERT INTO")
    select = insert[insert.index("SELECT") :].partition("ON CONFLICT")[0]
    return head + select


def clear_reviews() -> None:
    sql_exec("DELETE FROM reviews_reviewitem")
    sql_exec("VACUUM reviews_reviewitem")


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def plan_summary(sql: str, params: Any) -> str:
    """How a statement reads ledger_effect: 'Bitmap Index Scan on effect_unresolved_age_idx'."""
    plan = sql_rows(f"EXPLAIN (FORMAT JSON) {sql}", params)[0][0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    scans: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        index = node.get("Index Name", "")
        if index.startswith(("effect_", "ledger_effect")):
            scans.append(f"{node['Node Type']} on {index}")
        elif node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "ledger_effect":
            scans.append("Seq Scan on ledger_effect")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return ", ".join(scans) or "no scan of ledger_effect"


def explain(title: str, sql: str, params: Any, *, write: bool = False) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS); a writing statement runs in a transaction that is rolled
    back, with constraints made immediate so that the deferred foreign-key checks show."""
    from django.db import transaction

    lines: list[str] = []
    with contextlib.suppress(_Rollback), transaction.atomic():
        if write:
            sql_exec("SET CONSTRAINTS ALL IMMEDIATE")
        lines = [r[0] for r in sql_rows(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)]
        raise _Rollback
    print(f"\n{title}:")
    for line in lines:
        print(f"  {line}")
    return lines


def run_escalation(opts: Options, report: Report, agent_id: int) -> None:
    from reviews.alerts.escalation import escalate

    print(f"\nEscalation: {opts.total} effects, {opts.stale} of them stale.", flush=True)
    start = time.perf_counter()
    added = fill_to(opts.total, opts.stale, agent_id)
    generated = time.perf_counter() - start
    sql_exec("VACUUM ANALYZE ledger_effect")
    print(
        f"  generated {added} effects in {generated:.1f} s, VACUUM ANALYZE in "
        f"{time.perf_counter() - start - generated:.1f} s (not timed)",
        flush=True,
    )
    counts = dict(sql_rows("SELECT status, count(*) FROM ledger_effect GROUP BY status"))
    report.details["escalation_table"] = counts
    print("  table: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    stale_now = len(sql_rows(RAW_SELECT))
    report.check(
        f"the raw query finds exactly {opts.stale} stale effects",
        stale_now == opts.stale,
        f"{stale_now}",
    )

    statement, params = capture_escalation_sql()
    selection = selection_of(statement)
    plans = {
        "escalate()": plan_summary(selection, params),
        "raw SELECT": plan_summary(RAW_SELECT, None),
    }
    report.details["plans"] = plans
    for name, plan in plans.items():
        print(f"  {name} plan: {plan}")

    runs: dict[str, list[float]] = defaultdict(list)
    opened: list[int] = []
    for number in range(opts.repeats):
        clear_reviews()
        seconds, count = timed(escalate)
        runs["escalate"].append(seconds)
        opened.append(count)
        seconds, rows = timed(lambda: sql_rows(RAW_SELECT))
        runs["select"].append(seconds)
        clear_reviews()
        seconds, count_raw = timed(lambda: sql_exec(RAW_INSERT))
        runs["insert"].append(seconds)
        print(
            f"  run {number + 1}: escalate() {1000 * runs['escalate'][-1]:.0f} ms "
            f"({opened[-1]} opened), raw SELECT {1000 * runs['select'][-1]:.0f} ms "
            f"({len(rows)} rows), raw INSERT … SELECT {1000 * seconds:.0f} ms "
            f"({count_raw} rows)",
            flush=True,
        )
    clear_reviews()
    escalate()
    repeat_seconds, repeat_count = timed(escalate)
    print(
        f"  repeat sweep with every item already open: {1000 * repeat_seconds:.0f} ms, "
        f"{repeat_count} opened"
    )
    open_items = sql_rows("SELECT count(*) FROM reviews_reviewitem WHERE resolved_at IS NULL")[0][0]
    clear_reviews()

    report.check(
        f"escalate() opened exactly {opts.stale} review items every run",
        all(n == opts.stale for n in opened),
        f"{opened}",
    )
    report.check(
        "a repeat sweep opens nothing (one open item per effect)",
        repeat_count == 0 and open_items == opts.stale,
        f"{repeat_count} opened, {open_items} open",
    )

    best = {k: min(v) for k, v in runs.items()}
    report.details["escalation_seconds"] = dict(runs)
    report.rows += [
        Row(
            f"escalation: escalate() over {opts.total} effects (best of {opts.repeats})",
            best["escalate"],
            "s",
            f"< {ESCALATION_GOAL:g}",
            best["escalate"] < ESCALATION_GOAL,
        ),
        Row("escalation: raw SELECT, same selection (best)", best["select"], "s"),
        Row("escalation: escalate() ÷ raw SELECT", best["escalate"] / best["select"], "×"),
        Row("escalation: raw INSERT … SELECT, same rows (best)", best["insert"], "s"),
        Row("escalation: repeat sweep, nothing new", repeat_seconds, "s"),
    ]
    if opts.explain:
        report.details["explain"] = {
            "escalate_selection": explain(
                "EXPLAIN (ANALYZE, BUFFERS) of escalate()'s selection", selection, params
            ),
            "raw_select": explain("EXPLAIN (ANALYZE, BUFFERS) of the raw query", RAW_SELECT, None),
            "escalate_statement": explain(
                "EXPLAIN (ANALYZE, BUFFERS) of the whole escalation statement (rolled back; "
                "constraints immediate, so the foreign-key trigger shows)",
                statement,
                params,
                write=True,
            ),
        }
