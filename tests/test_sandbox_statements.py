"""The sandbox payments provider's statements, spoken to over real HTTP in its own process, and
the daily fetch that imports them."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx
import pytest

from devstack.sandbox.statements import micros
from ledger.effects.recovery import database_now
from ledger.models import StatementImport, Tool
from reconcilers.providers.outcomes import StatementFetchError
from reconcilers.providers.sandbox_payments.statement import fetch_sandbox_statement
from reconcilers.statement_fetch import fetch_due_statements, previous_day
from tests.factories import charge, refund

if TYPE_CHECKING:
    from tests.fixtures.providers import SandboxProvider


def statement(provider: SandboxProvider, start: str, end: str, fmt: str = "") -> httpx.Response:
    params = {"from": start, "to": end} | ({"format": fmt} if fmt else {})
    return provider.http.get("/statements", params=params)


def test_a_statement_lists_charges_and_refunds_of_its_period_as_csv(payments_provider):
    first = charge(payments_provider, "key-1").json()
    refunded = refund(payments_provider, "refund-1", {"charge": first["id"], "amount": "2.50"})
    stored = payments_provider.transactions()
    # A period that ends exactly at the refund's microsecond leaves it out: [from, to).
    refund_at = stored[1]["created_us"]
    end = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=refund_at)

    response = statement(payments_provider, "2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z")
    before_refund = statement(payments_provider, "2000-01-01T00:00:00Z", end.isoformat())

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/csv")
    assert response.headers["Content-Disposition"].endswith('.csv"')
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert list(rows[0]) == [
        "provider_ref",
        "reference",
        "amount",
        "currency",
        "status",
        "occurred_at",
        "type",
    ]
    assert [(r["provider_ref"], r["type"], r["amount"], r["reference"]) for r in rows] == [
        (first["id"], "charge", "10.00", "key-1"),
        (refunded.json()["id"], "refund", "2.50", "refund-1"),
    ]
    assert {(r["currency"], r["status"]) for r in rows} == {("EUR", "succeeded")}
    # UTC to the microsecond, the very moment the provider stored.
    occurred = datetime.fromisoformat(rows[1]["occurred_at"])
    assert rows[1]["occurred_at"].endswith("Z") and occurred == end
    assert [r["provider_ref"] for r in csv.DictReader(io.StringIO(before_refund.text))] == [
        first["id"]
    ]


def test_a_statement_as_json_lines_keeps_the_key_a_provider_ignoring_keys_received(
    start_sandbox,
):
    provider = start_sandbox("payments", "--ignore-keys")
    charge(provider, "key-1")
    charge(provider, "key-1")
    charge(provider)

    response = statement(provider, "2000-01-01", "2999-01-01", "jsonl")

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    # Two charges for one key: the statement shows what the provider really did.
    assert [line["reference"] for line in lines] == ["key-1", "key-1", ""]
    assert len({line["provider_ref"] for line in lines}) == 3
    assert all(line["type"] == "charge" and line["amount"] == "10.00" for line in lines)


def test_a_statement_of_an_empty_or_future_period_is_served_as_it_stands(payments_provider):
    charge(payments_provider, "key-1")

    empty = statement(payments_provider, "2000-01-01", "2000-01-02")
    future = statement(payments_provider, "2000-01-01", "2999-01-01T00:00:00+02:00", "jsonl")

    assert empty.text.strip() == ",".join(
        ["provider_ref", "reference", "amount", "currency", "status", "occurred_at", "type"]
    )
    assert len(future.text.splitlines()) == 1


def test_the_adapter_side_fetch_brings_back_the_statement_as_a_csv_file(payments_provider):
    made = charge(payments_provider, "key-1").json()
    start = datetime(2000, 1, 1, tzinfo=UTC)
    end = datetime.now(UTC) + timedelta(seconds=1)

    filename, content = fetch_sandbox_statement(payments_provider.url, start, end, timeout=5)

    assert filename.startswith("statement-20000101T000000Z-") and filename.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(content.decode())))
    assert [(r["provider_ref"], r["reference"]) for r in rows] == [(made["id"], "key-1")]
    payments_provider.kill()
    with pytest.raises(StatementFetchError, match="unreachable"):
        fetch_sandbox_statement(payments_provider.url, start, end, timeout=1)


def _fetching(tool: Tool, base_url: str) -> None:
    """charge_card declared as a tool whose statements the daily schedule fetches."""
    tool.reconciler_config = {"base_url": base_url, "timeout": 2}
    tool.statements = tool.fetch_statements = True
    tool.amount_path, tool.currency_path, tool.amount_unit = "amount", "currency", "major"
    tool.save()


def test_the_daily_fetch_imports_yesterdays_statement_once_as_final(payments_provider, tools):
    _fetching(tools["charge_card"], payments_provider.url)
    made = charge(payments_provider, "key-1").json()
    charge(payments_provider, "key-today")
    start, end = previous_day(database_now())
    # The first charge back-dated into yesterday in the provider's own store.
    with sqlite3.connect(payments_provider.store) as store:
        store.execute(
            "UPDATE transactions SET created_us = ? WHERE id = ?",
            (micros(start + timedelta(hours=12)), made["id"]),
        )

    first = fetch_due_statements()
    again = fetch_due_statements()

    assert first == {"imported": ["charge_card"], "already_imported": [], "failed": {}}
    assert again["already_imported"] == ["charge_card"] and again["imported"] == []
    imported = StatementImport.objects.get(tool="charge_card")
    assert (imported.period_start, imported.period_end) == (start, end)
    assert not imported.provisional
    assert (imported.origin, imported.imported_by) == ("fetch", "system:statements")
    assert imported.lines == 1  # yesterday's charge only


def test_a_provider_down_fails_that_tools_fetch_and_imports_nothing(payments_provider, tools):
    _fetching(tools["charge_card"], payments_provider.url)
    payments_provider.kill()

    result = fetch_due_statements()

    assert result["imported"] == []
    assert "unreachable" in result["failed"]["charge_card"]
    assert not StatementImport.objects.exists()


@pytest.mark.parametrize(
    "query",
    [
        {"to": "2000-01-02"},
        {"from": "yesterday", "to": "2000-01-02"},
        {"from": "2000-01-02", "to": "2000-01-01"},
        {"from": "2000-01-01", "to": "2000-01-02", "format": "xlsx"},
    ],
)
def test_a_statement_request_without_a_sound_period_or_format_is_refused_with_400(
    payments_provider, query
):
    response = payments_provider.http.get("/statements", params=query)

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
