"""The crash test's observer: what the provider holds and what the ledger's database says, read
directly as an outsider would, then compared (`devstack.crashtest.report`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

from devstack.crashtest import callers
from devstack.crashtest.report import Verdict, compare, compare_counts
from ledger.models import Effect, EffectEvent, ReviewItem
from ledger.models.states import Kind, Status, sql_list
from ledger.statements.apply import ACTOR as STATEMENTS
from reconcilers.reconcile import ACTOR as RECONCILER

EFFECTS = Effect._meta.db_table
EVENTS = EffectEvent._meta.db_table
REVIEW_ITEMS = ReviewItem._meta.db_table
# The sandbox's own payments API, in its three modes; any other provider is a real one.
KEYS, LOOKUP_ONLY, STATEMENT = "keys", "lookup-only", "statement"
PROVIDERS = (KEYS, LOOKUP_ONLY, STATEMENT)


def _effects(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every action of the run as the ledger holds it."""
    columns = ("id", "run_id", "status", "provider_ref", "resolved", "idempotency_key")
    rows = conn.execute(
        "SELECT id::text, run_id, status, provider_ref, extract(epoch FROM resolved_at), "
        f"idempotency_key FROM {EFFECTS} WHERE kind = '{Kind.ACTION.value}'"
    ).fetchall()
    return [dict(zip(columns, row, strict=True)) for row in rows]


def verdict(
    conn: psycopg.Connection[Any],
    provider_url: str,
    workflows: list[dict[str, Any]],
    crash_dir: Path,
    infra: Counter[str],
    provider: str,
) -> Verdict:
    effects = _effects(conn)
    reviews = {
        str(effect_id): reason
        for effect_id, reason in conn.execute(
            f"SELECT effect_id, reason FROM {REVIEW_ITEMS} WHERE resolved_at IS NULL"
        ).fetchall()
    }
    by_point: Counter[str] = Counter(infra)
    latencies = []
    resolved = {e["run_id"]: e["resolved"] for e in effects}
    for marker in crash_dir.glob("*") if crash_dir.exists() else []:
        run_id, point = marker.name.rsplit(".", 1)
        by_point[point] += 1
        done = resolved.get(run_id)
        if done is not None:
            latencies.append(max(0.0, float(done) - float(marker.read_text())))
    if provider in PROVIDERS:
        txns = httpx.get(f"{provider_url}/_sandbox/transactions", trust_env=False).json()
        records = txns.get("data", txns) if isinstance(txns, dict) else txns
        charges = [t for t in records if t.get("object") == "charge"]
        machine_only = provider in (LOOKUP_ONLY, STATEMENT)
        verdict = compare(
            workflows,
            charges,
            effects,
            reviews,
            dict(by_point),
            latencies,
            machine_only=machine_only,
        )
    else:
        caller = callers.load(provider)
        verdict = compare_counts(
            workflows,
            caller.records(provider_url),
            effects,
            reviews,
            dict(by_point),
            latencies,
            machine_only=callers.machine_only(caller),
        )
    verdict.settled_by_machine, verdict.reviews_closed_by_machine = _machine_work(conn)
    return verdict


# Out of doubt: what a lookup or a statement may settle, and where that leaves an effect.
_IN_DOUBT = sql_list((Status.DISPATCHING, Status.UNKNOWN, Status.AWAITING_CONFIRMATION))
_OUT_OF_DOUBT = sql_list((Status.PLANNED, Status.CONFIRMED, Status.FAILED))


def _machine_work(conn: psycopg.Connection[Any]) -> tuple[dict[str, int], int]:
    """Effects a machine moved out of doubt, by how (a lookup: the reconciler; a statement:
    its importer), and the review items machines closed."""
    rows = conn.execute(
        f"SELECT CASE WHEN actor = %s THEN 'lookup' ELSE 'statement' END, "
        f"count(DISTINCT effect_id) FROM {EVENTS} "
        f"WHERE kind = 'transition' AND actor IN (%s, %s) "
        f"AND from_status IN ({_IN_DOUBT}) AND to_status IN ({_OUT_OF_DOUBT}) GROUP BY 1",
        [RECONCILER, RECONCILER, STATEMENTS],
    ).fetchall()
    row = conn.execute(f"SELECT count(*) FROM {EVENTS} WHERE kind = 'review_closed'").fetchone()
    return {how: int(n) for how, n in rows}, int(row[0]) if row else 0
