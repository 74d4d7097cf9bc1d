"""The payments provider's own record: `GET /statements?from=ISO&to=ISO[&format=csv|jsonl]`.

One line per charge and refund created in [from, to), in creation order, with the columns a
ledger imports (`ledger.statements`):

    provider_ref,reference,amount,currency,status,occurred_at,type

`reference` is what the provider received to name the request: the `Idempotency-Key` header
(kept even by a provider that ignores keys, as `received_key`), else a `reference` metadata
value; empty when there was neither. Amounts are in major units ("10.00"), `occurred_at` is
UTC to the microsecond. A provider serves what it has: a period reaching into the future is
answered with the lines so far (whether such a statement is final is the importer's call).
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from devstack.sandbox.money import format_amount, invalid
from devstack.sandbox.service import Reply
from devstack.sandbox.store import Store

COLUMNS = ("provider_ref", "reference", "amount", "currency", "status", "occurred_at", "type")
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def micros(moment: datetime) -> int:
    """Microseconds since the epoch, exactly (no float on the way: a period boundary and a
    charge created on it must compare the same every time)."""
    return (moment - EPOCH) // MICROSECOND


def _moment(query: dict[str, str], name: str) -> datetime:
    value = query.get(name)
    if not value:
        raise invalid(f"Missing required parameter: {name} (an ISO 8601 time).")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(f"`{name}` must be an ISO 8601 time, got {value!r}.") from None
    # A time without an offset is UTC, as the statement's own times are.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def lines(store: Store, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The statement's lines for [start, end), oldest first."""
    with store.reading() as db:
        rows = db.execute(
            "SELECT id, object, status, amount, currency, reference, created_us"
            " FROM transactions WHERE created_us >= ? AND created_us < ?"
            " ORDER BY created_us, seq",
            (micros(start), micros(end)),
        ).fetchall()
    return [
        {
            "provider_ref": row["id"],
            "reference": row["reference"] or "",
            "amount": format_amount(row["amount"]),
            "currency": row["currency"],
            "status": row["status"],
            "occurred_at": (EPOCH + row["created_us"] * MICROSECOND)
            .isoformat(timespec="microseconds")
            .replace("+00:00", "Z"),
            "type": row["object"],
        }
        for row in rows
    ]


def render(rows: list[dict[str, Any]], fmt: str) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows).encode()
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def statement(store: Store, query: dict[str, str]) -> Reply:
    start, end = _moment(query, "from"), _moment(query, "to")
    if end <= start:
        raise invalid("`to` must be later than `from`.")
    fmt = query.get("format", "csv")
    if fmt not in FORMATS:
        raise invalid(f"`format` must be one of {sorted(FORMATS)}, got {fmt!r}.")
    filename = f"statement-{_stamp(start)}-{_stamp(end)}.{fmt}"
    return Reply(
        200,
        raw=render(lines(store, start, end), fmt),
        content_type=FORMATS[fmt],
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
