"""The pages the operator and auditor guides show, in Chromium, photographed for the guides.

One ledger is seeded as an operator would find it on a working day (review items of several
kinds, a halt, two days of statements with an orphan line, sealed events), then the pages the
guides picture are visited: the overview, the review queue, an effect page with its decision
dialog open, the halts, statements and incidents pages as an operator; the exports and audit
chain pages as an auditor. Each visit checks what the guide says the page shows, and the
page's console stays clean (`watch`), so this test fails like any other when a page breaks.

Each page is saved as a PNG of the 1280×800 viewport. Where is chosen by the environment:
`LEDGER_DOCS_SCREENSHOTS=docs/screenshots` (as `make docs-screenshots` sets it) writes the
guides' own images, relative to the repository; unset (`make test`), a temporary directory.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from ledger.audit import seal
from ledger.containment.halts import halt, resume
from ledger.models import Effect, Reason, ReviewItem, Tool
from ledger.rules.reviewqueue import open_review
from ledger.statements import import_statement
from tests.browser.conftest import nav
from tests.factories import lookup
from tests.helpers import ROOT

pytestmark = [
    pytest.mark.browser,
    pytest.mark.browser_context_args(viewport={"width": 1280, "height": 800}),
]

# The guides embed the PNGs; each must stay small enough to keep in the repository.
LARGEST_PNG = 200 * 1024
STATEMENT_HEADER = "provider_ref,reference,amount,currency,status,occurred_at,type"


@pytest.fixture
def shots(tmp_path) -> Path:
    """Where the PNGs go: the directory LEDGER_DOCS_SCREENSHOTS names, else a temporary one."""
    chosen = os.environ.get("LEDGER_DOCS_SCREENSHOTS", "").strip()
    where = (ROOT / chosen) if chosen else tmp_path / "screenshots"
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture
def head_file(tmp_path, settings) -> Path:
    """Chain heads exported to a file of this test's own, never the repository's var/."""
    settings.LEDGER_CHAIN_HEAD_FILE = str(tmp_path / "chain-heads.jsonl")
    return Path(settings.LEDGER_CHAIN_HEAD_FILE)


def charge(amount: str) -> dict[str, str]:
    return {"amount": amount, "currency": "EUR", "account": "acct_42"}


def queued(make_effect, status: str, reason: Reason, key: str, **fields) -> Effect:
    effect = make_effect(status, effect_key=key, run_id=key.split(":")[0], **fields)
    open_review(effect.id, reason)
    return effect


def working_day(make_effect) -> dict[str, Effect]:
    """A ledger with something in every part of the guides; returns the effects pictured."""
    tool = Tool.objects.get(name="charge_card")
    tool.amount_path, tool.currency_path, tool.amount_unit = "amount", "currency", "major"
    tool.statements = True
    tool.limit_claims_per_minute = 60
    tool.limit_amount_per_day = {"EUR": "5000.00"}
    tool.approve_above = Decimal("1000.00")
    tool.save()

    for n, amount in enumerate(("18.00", "64.50", "120.00", "9.99", "35.00"), start=2001):
        make_effect(
            "confirmed",
            effect_key=f"order-{n}:charge",
            run_id=f"order-{n}",
            request=charge(amount),
            provider_ref=f"ch_{n}",
            attempt=1,
        )
    make_effect("dispatching", effect_key="order-2101:charge", request=charge("15.00"))
    make_effect("planned", effect_key="order-2102:charge", request=charge("22.00"))

    found = queued(
        make_effect,
        "unknown",
        Reason.INCONCLUSIVE,
        "order-1041:charge",
        attempt=1,
        request=charge("42.00"),
    )
    lookup(found, "found", provider_ref="ch_1041", status="confirmed")
    twice = queued(
        make_effect,
        "confirmed",
        Reason.DUPLICATE,
        "order-1043:charge",
        attempt=1,
        request=charge("25.00"),
        provider_ref="ch_1043a",
    )
    lookup(twice, "duplicate", provider_refs=["ch_1043a", "ch_1043b"])
    differs = make_effect(
        "unknown", effect_key="order-1044:charge", run_id="order-1044", attempt=1,
        request=charge("80.00"),
    )  # fmt: skip
    lookup(
        differs,
        "found",
        provider_ref="ch_1044",
        status="confirmed",
        mismatches=["amount"],
        record={"id": "ch_1044", "amount": "8.00", "currency": "EUR", "status": "succeeded"},
    )
    open_review(differs.id, Reason.MISMATCH)
    queued(
        make_effect,
        "awaiting_confirmation",
        Reason.STALE,
        "order-1045:charge",
        attempt=1,
        request=charge("12.00"),
    )
    queued(
        make_effect,
        "planned",
        Reason.ATTEMPTS_EXHAUSTED,
        "order-1046:charge",
        attempt=3,
        request=charge("7.50"),
    )
    queued(
        make_effect,
        "awaiting_approval",
        Reason.APPROVAL_REQUIRED,
        "payout-7:charge",
        request=charge("2500.00"),
    )
    queued(
        make_effect,
        "unknown",
        Reason.NO_LOOKUP,
        "order-1041:receipt",
        tool="send_email",
        target="buyer@example.com",
        attempt=1,
        request={"to": "buyer@example.com", "template": "receipt"},
    )

    resumed = halt("tool", "send_email", reason="bounce storm at the mail relay", by="olga")
    resume(resumed.halt.pk, reason="relay fixed", by="olga")
    halt("tool", "create_ticket", reason="ticket flood from the planner, INC-42", by="olga")
    return {"found": found}


def statements(make_effect) -> None:
    """Two final days of charge_card statements: one line matching a charge, and a line no
    effect intended (an orphan, an incident once the next day is in too)."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first, second = today - timedelta(days=2), today - timedelta(days=1)
    paid = make_effect(
        "confirmed", effect_key="order-1990:charge", run_id="order-1990", attempt=1,
        request=charge("42.00"), provider_ref="ch_1990",
    )  # fmt: skip
    at = (first + timedelta(hours=9)).isoformat()
    lines = [
        f"ch_1990,{paid.idempotency_key},42.00,EUR,succeeded,{at},charge",
        f"ch_9001,no-such-key,310.00,EUR,succeeded,{at},charge",
    ]
    for day, body, name in (
        (first, lines, "charges-day-1.csv"),
        (second, [], "charges-day-2.csv"),
    ):
        import_statement(
            "charge_card",
            "\n".join([STATEMENT_HEADER, *body]).encode(),
            filename=name,
            period_start=day,
            period_end=day + timedelta(days=1),
            provisional=False,
            by="operator:olga",
            origin="upload",
        )


def photograph(page: Page, shots: Path, name: str, *, top: str = "") -> None:
    """The viewport as a PNG, once the page is settled (its partials and fonts loaded); `top`:
    a selector to scroll to the top of the viewport first (the part the guide talks about)."""
    page.wait_for_load_state("networkidle")
    if top:
        page.locator(top).evaluate("e => e.scrollIntoView({block: 'start'})")
    path = shots / f"{name}.png"
    page.screenshot(path=str(path))
    size = path.stat().st_size
    assert 0 < size <= LARGEST_PNG, f"{path.name}: {size} bytes"


def test_the_pages_the_guides_show_render_and_are_photographed(
    signed_in, olga, audrey, make_effect, head_file, shots
):
    seeded = working_day(make_effect)
    statements(make_effect)
    page = signed_in(olga)

    # The overview: counts by status, open items by age, the halt banner.
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    expect(page.locator("#halt-banner")).to_contain_text("tool create_ticket")
    expect(page.locator("#approval-banner")).to_contain_text("1")
    photograph(page, shots, "overview")

    # The queue: every open item, the suggested decision of the one the lookup found.
    nav(page, "Review queue")
    open_items = ReviewItem.objects.filter(resolved_at__isnull=True).count()
    expect(page.locator("#rows tr.queue-row")).to_have_count(open_items)
    item = ReviewItem.objects.get(effect=seeded["found"])
    row = page.locator(f"tr#item-{item.pk}")
    expect(row.locator("[data-suggest]")).to_have_text("Confirm (the lookup found ch_1041)")
    expect(page.locator("#incident-banner")).to_contain_text("1 open incident")
    photograph(page, shots, "queue", top="#bulk")

    # The effect page: the suggested decision open and filled in, its dialog asking.
    row.locator("[data-suggest]").click()
    decision = page.locator("#decide-confirm")
    expect(decision).to_have_attribute("open", "")
    expect(decision.get_by_role("textbox", name="Provider reference")).to_have_value("ch_1041")
    decision.get_by_role("textbox", name="Reason").fill("Found at the provider by the lookup")
    decision.locator("button[data-decide-submit]").click()
    dialog = decision.locator("dialog.decide-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".decide-question")).to_have_text(
        "Confirm order-1041:charge as done by the provider (ref ch_1041)?"
    )
    photograph(page, shots, "effect-decision")
    dialog.get_by_role("button", name="Back", exact=True).click()
    expect(dialog).to_be_hidden()
    assert Effect.objects.get(pk=seeded["found"].pk).status == "unknown"  # nothing decided

    # Halts: the active one with its reason, the resumed one below.
    nav(page, "Halts")
    expect(page.locator("#active-halts")).to_contain_text("ticket flood from the planner")
    expect(page.get_by_role("heading", name="Resumed recently")).to_be_visible()
    photograph(page, shots, "halts")

    # Statements: both days imported, final; the upload form for operators.
    nav(page, "Statements")
    expect(page.locator("#imports tbody tr")).to_have_count(2)
    expect(page.locator("#statement-form")).to_be_visible()
    photograph(page, shots, "statements", top="#imports-title")

    # Incidents: the orphan line, with the acknowledge form.
    nav(page, "Incidents")
    expect(page.get_by_role("heading", name="Incidents", level=1)).to_be_visible()
    expect(page.locator("main")).to_contain_text("ch_9001")
    expect(page.get_by_role("button", name="Acknowledge")).to_be_visible()
    photograph(page, shots, "incidents")

    # An auditor: read only; an export downloaded, then the exports page lists it.
    auditor = signed_in(audrey)
    expect(auditor.locator("header .who")).to_contain_text("(read only)")
    nav(auditor, "Exports")
    download = auditor.request.get("/audit/exports/effects.csv?tool=charge_card")
    assert download.ok and download.text().startswith("id,")
    auditor.reload()
    expect(auditor.locator("table.exports-recent")).to_contain_text("effects.csv")
    photograph(auditor, shots, "exports", top="fieldset.downloads")

    # The audit chain: sealed, its head exported, verified intact.
    seal.seal_all()
    seal.export_head()
    nav(auditor, "Audit chain")
    auditor.get_by_role("button", name="Verify now").click()
    expect(auditor.locator("#chain-verdict")).to_contain_text("Intact.")
    photograph(auditor, shots, "chain")

    assert sorted(p.name for p in shots.glob("*.png")) >= sorted(
        f"{n}.png"
        for n in ("overview", "queue", "effect-decision", "halts", "statements", "incidents",
                  "exports", "chain")
    )  # fmt: skip
