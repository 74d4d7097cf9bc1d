"""An alert email's decision link in Chromium (issue 33, ADR 0020): it leads to the sign-in
page, then to the effect page with that decision's form open; the decision is recorded only
once the person fills it in and confirms it, with "email" as its channel; the link, followed
again, says it was used."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from playwright.sync_api import expect

from ledger.models import Effect
from tests.factories import lookup
from tests.helpers import PASSWORD
from tests.slack_interactive import alert_on

pytestmark = pytest.mark.browser
LINK = re.compile(r"^  Mark failed: (?P<url>\S+/links/\S+)$", re.MULTILINE)


def test_a_link_opens_the_decision_after_sign_in_and_works_once(
    open_page, live_server, settings, mailoutbox, make_effect, tools, olga
):
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    settings.LEDGER_ALERT_WEBHOOK_URL = ""
    settings.LEDGER_ALERT_LINK_BASE = live_server.url
    effect = make_effect("unknown", attempt=1, effect_key="order-9:charge")
    lookup(effect, "found", provider_ref="ch_42", status="confirmed")
    alert_on(effect)
    url = LINK.search(mail.outbox[-1].body)["url"]
    page = open_page()

    page.goto(url)
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    page.get_by_label("Username").fill(olga.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    decision = page.locator("#decide-fail")
    expect(decision).to_have_attribute("open", "")
    assert page.url.endswith(f"/effects/{effect.id}/?decide=fail#decide-fail")
    assert not Effect.objects.filter(parent=effect, kind="decision").exists()
    decision.get_by_role("textbox", name="Evidence").fill("The bank declined it (ticket 7).")
    decision.get_by_role("textbox", name="Reason").fill("Declined at the bank.")
    decision.get_by_role("button", name="Record decision: Mark failed").click()
    dialog = decision.locator("dialog.decide-dialog")
    expect(dialog).to_be_visible()
    dialog.locator("[data-dialog-confirm]").click()
    expect(page.locator("#decision-result")).to_contain_text("Decision recorded (fail)")

    recorded = Effect.objects.get(parent=effect, kind="decision")
    assert recorded.provenance["channel"] == "email"
    assert recorded.provenance["actor"] == "operator:olga"

    answer = page.goto(url)
    assert answer is not None and answer.status == 410
    expect(page.get_by_role("heading", name="This link was used already")).to_be_visible()
