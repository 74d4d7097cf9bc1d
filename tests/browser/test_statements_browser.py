"""Statements in Chromium: an operator uploads two days' final statements through the form, sees
them listed, finds the orphan the second one brings to light in the queue's banner, and
acknowledges it on the incidents page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from ledger.models import Incident, StatementImport
from tests.browser.conftest import nav

pytestmark = pytest.mark.browser

HEADER = "provider_ref,reference,amount,currency,status,occurred_at,type"


def upload(page: Page, day: datetime, lines: list[str], name: str) -> None:
    """Fill the upload form for the UTC day starting at `day` and submit it."""
    form = page.locator("#statement-form")
    form.get_by_label("Tool").select_option("charge_card")
    form.get_by_label("Statement file").set_input_files(
        {"name": name, "mimeType": "text/csv", "buffer": "\n".join([HEADER, *lines]).encode()}
    )
    form.get_by_label("Period start (UTC)").fill(day.strftime("%Y-%m-%dT%H:%M"))
    form.get_by_label("Period end (UTC, not included)").fill(
        (day + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    )
    form.get_by_role("button", name="Import").click()


def test_an_operator_uploads_statements_and_acknowledges_the_orphan_they_show(
    signed_in, olga, stmt_tool
):
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first, second = today - timedelta(days=2), today - timedelta(days=1)
    page = signed_in(olga)

    nav(page, "Statements")
    expect(page.locator("#no-imports")).to_be_visible()
    at = (first + timedelta(hours=5)).isoformat()
    orphan = f"ch_orphan_1,no-such-key,25.00,EUR,succeeded,{at},charge"
    upload(page, first, [orphan], "day-1.csv")
    expect(page.get_by_role("status").filter(has_text="Imported day-1.csv")).to_contain_text(
        "1 line, 0 matched to effects"
    )
    made = StatementImport.objects.get()
    expect(page.locator(f"#import-{made.pk}")).to_contain_text("operator:olga")
    expect(page.locator(f"#import-{made.pk}")).to_contain_text("final")

    upload(page, second, [], "day-2.csv")
    expect(page.get_by_role("status").filter(has_text="Imported day-2.csv")).to_contain_text(
        "orphan incidents 1"
    )
    expect(page.locator("#imports tbody tr")).to_have_count(2)

    nav(page, "Review queue")
    banner = page.locator("#incident-banner")
    expect(banner).to_contain_text("1 open incident")
    banner.get_by_role("link", name="See incidents").click()

    incident = Incident.objects.get()
    row = page.locator(f"#incident-{incident.pk}")
    expect(row).to_contain_text("ch_orphan_1")
    expect(row).to_contain_text("25.00 EUR")
    row.get_by_label("What was found").fill("Charged by hand at the provider's desk; refunded")
    row.get_by_role("button", name="Acknowledge").click()

    expect(page.locator("#no-incidents")).to_be_visible()
    expect(page.locator("#acknowledged-incidents")).to_contain_text("refunded")
    expect(page.locator("#acknowledged-incidents")).to_contain_text("by olga")
    incident.refresh_from_db()
    assert incident.acknowledged_by == olga and incident.decision_id is not None
