"""Halts in Chromium: an operator halts a tool from the dashboard, every page shows the banner
(to an auditor too), an agent's claim is refused meanwhile, and resuming clears it all."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ledger.models import Effect, Halt
from ledger.models.states import Kind
from tests.browser.conftest import nav
from tests.helpers import assert_error

pytestmark = pytest.mark.browser

PAGES = ("Overview", "Review queue", "Exports", "Audit chain", "Halts")


def test_an_operator_halts_a_tool_the_banner_shows_everywhere_and_resuming_clears_it(
    signed_in, olga, audrey, alice
):
    effect = alice.intent(step_id="pay")
    page = signed_in(olga)
    expect(page.locator("#halt-banner")).to_have_count(0)

    nav(page, "Halts")
    expect(page.locator("#no-halts")).to_be_visible()
    page.get_by_label("What to halt").select_option("tool")
    page.get_by_label("Name").fill("charge_card")
    page.get_by_label("Reason", exact=True).fill("Duplicate charges on order 7")
    page.get_by_label("I understand that claims stop at once").check()
    page.get_by_role("button", name="Halt", exact=True).click()

    banner = page.locator("#halt-banner")
    expect(banner).to_contain_text("tool charge_card")
    expect(banner).to_contain_text("Duplicate charges on order 7")
    expect(page.locator("#active-halts")).to_contain_text("olga")
    halt = Halt.objects.get(resumed_at__isnull=True)
    assert (halt.scope, halt.value, halt.halted_by) == ("tool", "charge_card", "olga")
    claim = alice.post(f"/effects/{effect['id']}/claim", {"owner": "w"})
    assert assert_error(claim, 409, "halted")["halt"]["by"] == "olga"

    auditor = signed_in(audrey)
    for name in PAGES:
        nav(auditor, name)
        expect(auditor.locator("#halt-banner")).to_contain_text("tool charge_card")
    # Auditors read the halts but have no controls.
    expect(auditor.get_by_role("button", name="Resume")).to_have_count(0)
    expect(auditor.locator("#halt-form")).to_have_count(0)

    row = page.locator(f"#halt-{halt.pk}")
    row.get_by_label("Reason for resuming").fill("Provider confirmed the fix")
    row.get_by_label("Claims resume at once").check()
    row.get_by_role("button", name="Resume").click()

    expect(page.locator("#no-halts")).to_be_visible()
    expect(page.locator("#halt-banner")).to_have_count(0)
    for name in PAGES:
        nav(auditor, name)
        expect(auditor.locator("#halt-banner")).to_have_count(0)
    assert alice.claim(effect["id"])["status"] == "dispatching"
    actions = Effect.objects.filter(kind=Kind.DECISION, agent__name="system").order_by("seq")
    assert [d.provenance["action"] for d in actions] == ["halt", "resume"]
