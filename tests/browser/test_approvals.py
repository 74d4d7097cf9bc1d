"""Four-eyes in Chromium: two operators. The one who proposed a retry on their own word cannot
approve it; the other approves it in the dashboard. An intent above the approval threshold
shows in the queue and another operator approves it there."""

from __future__ import annotations

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from ledger.models import Effect, Reason, RetryProposal, ReviewItem, Tool
from ledger.models.states import Kind
from ledger.rules.reviewqueue import open_review
from tests.browser.conftest import confirm_decision, fill_decision, nav

pytestmark = pytest.mark.browser


def decisions_on(effect: Effect) -> list[str]:
    rows = Effect.objects.filter(parent=effect, kind=Kind.DECISION).order_by("created_at")
    return [d.provenance["action"] for d in rows]


def test_the_proposer_cannot_approve_their_retry_and_the_second_operator_does(
    signed_in, olga, otto, make_effect
):
    email = make_effect("unknown", tool="send_email", attempt=1, effect_key="order-9:email")
    open_review(email.id, Reason.NO_LOOKUP)

    page = signed_in(olga)
    page.goto(f"/effects/{email.id}/")
    fill_decision(page, "retry", evidence="Mail log: never handed to the relay", reason="resend")
    page.locator("#decide-retry").get_by_label(
        "I checked with the provider: it never received this request"
    ).check()
    confirm_decision(page, "retry")

    expect(page.locator("#four-eyes")).to_contain_text("another operator must decide")
    expect(page.locator("#effect-status")).to_have_text("unknown")
    expect(page.locator("#decide-approve")).to_have_count(0)
    expect(page.locator("#decide-retry")).to_have_count(0)
    assert RetryProposal.objects.get(effect=email).proposed_by == olga

    other = signed_in(otto)
    other.goto(f"/effects/{email.id}/")
    expect(other.locator("#four-eyes")).to_contain_text("olga asked for it")
    fill_decision(other, "approve", reason="Relay log agrees: not sent")
    confirm_decision(other, "approve")

    expect(other.locator("#effect-status")).to_have_text("planned")
    expect(other.locator("#four-eyes")).to_have_count(0)
    assert decisions_on(email) == ["propose_retry", "approve"]
    assert RetryProposal.objects.get(effect=email).decided_by == otto


def test_an_effect_above_the_threshold_waits_in_the_queue_until_an_operator_approves(
    signed_in, otto, alice, tools
):
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount",
        currency_path="currency",
        limit_amount_per_day={"EUR": "100000.00"},
        approve_above=Decimal("1000.00"),
    )
    held = alice.intent(step_id="big", request={"amount": "4000.00", "currency": "EUR"})
    effect = Effect.objects.get(pk=held["id"])
    item = ReviewItem.objects.get(effect=effect)

    page = signed_in(otto)
    nav(page, "Review queue")
    row = page.locator(f"tr#item-{item.pk}")
    expect(row).to_contain_text("Above the approval threshold")
    row.get_by_role("link", name="Open").click()
    expect(page.locator("#effect-status")).to_have_text("awaiting_approval")
    fill_decision(page, "approve", reason="Customer confirmed the large order by phone")
    confirm_decision(page, "approve")

    expect(page.locator("#effect-status")).to_have_text("planned")
    assert decisions_on(effect) == ["approve"]
    assert alice.claim(held["id"])["status"] == "dispatching"
