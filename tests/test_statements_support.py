"""What the statement tests share (no tests here): the tools that declare statements, effects
with a dispatch history back-dated in SQL, and statement files written as a provider does."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection

from ledger.models import Effect, StatementImport
from ledger.policy.toolfile import load
from ledger.statements import import_statement

TOOLS = """
[tools.stmt_pay]
preset = "unsafe"
statements = true
amount_path = "amount"
currency_path = "currency"
amount_unit = "major"
settle_after = "2m"
statement_skew = "5m"
compensated_by = "stmt_refund"
reconciler = "manual"

[tools.stmt_refund]
preset = "unsafe"
amount_path = "amount"
currency_path = "currency"
amount_unit = "major"
reconciler = "manual"

[tools.stmt_minor]
preset = "unsafe"
statements = true
amount_path = "amount"
currency_path = "currency"
amount_unit = "minor"
statement_reference = "effect_id"
statement_columns = { provider_ref = "id", reference = "ref", status = "state" }
statement_status = { paid = "succeeded", declined = "failed" }
reconciler = "manual"
"""
HEADER = ("provider_ref", "reference", "amount", "currency", "status", "occurred_at", "type")


def load_tools(tmp_path: Path) -> None:
    path = tmp_path / "statement-tools.toml"
    path.write_text(TOOLS)
    load(path)


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def day(now: datetime, days_ago: int) -> tuple[datetime, datetime]:
    """The UTC day `days_ago` days before today, as a statement period."""
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start -= timedelta(days=days_ago)
    return start, start + timedelta(days=1)


def add_event(
    effect: Effect, at: datetime, *, kind: str = "transition", frm: str = "", to: str = "",
    reason: str = "", data: str = "{}", actor: str = "agent:alice",
) -> None:  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status, "
            "reason, data, digest, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s)",
            [effect.id, kind, actor, frm, to, reason, data, "0" * 64, at],
        )


def dispatched(
    make_effect: Any,
    claims: list[tuple[datetime, datetime | None]],
    *,
    status: str = "unknown",
    request: dict[str, Any] | None = None,
    tool: str = "stmt_pay",
    **fields: Any,
) -> Effect:
    """An effect of `tool` with one dispatch per (claimed, left) pair (left None: still
    dispatching, its lease ending one minute after the claim), now in `status`."""
    last_claim, last_left = claims[-1]
    values: dict[str, Any] = {
        "tool": tool,
        "request": request or {"amount": "12.50", "currency": "EUR"},
        "attempt": len(claims),
    }
    if status == "dispatching":
        values.update(
            lease_token="tok", lease_owner="w", lease_seconds=60,
            lease_expires_at=last_claim + timedelta(minutes=1),
        )  # fmt: skip
    elif last_left is not None:
        values["left_dispatch_at"] = last_left
    values.update(fields)
    effect = make_effect(status, **values)
    for claimed, left in claims:
        add_event(effect, claimed, frm="planned", to="dispatching", reason="claimed")
        if left is not None:
            add_event(effect, left, frm="dispatching", to="unknown", reason="timeout")
    return Effect.objects.get(pk=effect.pk)


def statement_csv(rows: list[dict[str, Any]], header: tuple[str, ...] = HEADER) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in rows:
        writer.writerow([row.get(column, "") for column in header])
    return out.getvalue().encode()


def line(effect: Effect | None, at: datetime, **values: Any) -> dict[str, Any]:
    """A successful charge line for `effect` (by idempotency key) of 12.50 EUR at `at`."""
    row = {
        "provider_ref": f"ch_{at.timestamp():.0f}_{values.pop('n', 1)}",
        "reference": effect.idempotency_key if effect is not None else "",
        "amount": "12.50",
        "currency": "EUR",
        "status": "succeeded",
        "occurred_at": at.isoformat(),
        "type": "charge",
    }
    row.update(values)
    return row


def run_import(
    period: tuple[datetime, datetime],
    rows: list[dict[str, Any]],
    *,
    tool: str = "stmt_pay",
    provisional: bool = False,
    filename: str = "statement.csv",
    content: bytes | None = None,
) -> StatementImport:
    return import_statement(
        tool,
        content if content is not None else statement_csv(rows),
        filename=filename,
        period_start=period[0],
        period_end=period[1],
        provisional=provisional,
        by="shell:tester",
        origin="command",
    )
