"""From the queue to resolved in three actions: open the item, send the suggested decision
(its form open and filled in from the evidence), confirm once in a dialog that names the
decision and the effect. Counted as clicks + typed fields + confirmations, in Chromium."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, Page, expect

from ledger.models import Effect, Reason, ReviewItem
from ledger.models.states import Kind
from ledger.rules.reviewqueue import open_review
from tests.factories import lookup

pytestmark = pytest.mark.browser

# The most actions an operator may need from the queue to resolved for conclusive evidence.
MOST = 3


@dataclass
class Tally:
    """What the operator did: each click, typed field and confirmation is one action."""

    page: Page
    actions: int = 0

    def click(self, locator) -> None:
        locator.click()
        self.actions += 1


def queued(make_effect, status: str, reason: Reason, key: str, **fields: Any) -> Effect:
    effect = make_effect(status, effect_key=key, **fields)
    open_review(effect.id, reason)
    return effect


def _found(make_effect) -> Effect:
    effect = queued(make_effect, "unknown", Reason.INCONCLUSIVE, "pay-101:charge", attempt=1)
    lookup(effect, "found", provider_ref="ch_101", status="confirmed")
    return effect


def _mismatched(make_effect, n: int, status: str, amount: str, their_status: str) -> Effect:
    """An unknown charge the lookup found with another amount (a `mismatch` item)."""
    effect = make_effect("unknown", effect_key=f"pay-{n}:charge", attempt=1)
    ref = f"ch_{n}"
    lookup(
        effect,
        "found",
        provider_ref=ref,
        status=status,
        mismatches=["amount"],
        record={"id": ref, "amount": amount, "status": their_status},
    )
    open_review(effect.id, Reason.MISMATCH)
    return effect


def _declined(make_effect) -> Effect:
    return _mismatched(make_effect, 102, "failed", "9.00", "failed")


def _absent(make_effect) -> Effect:
    effect = queued(make_effect, "unknown", Reason.NOT_FOUND_UNPROVEN, "pay-103:charge", attempt=1)
    lookup(effect, "not_found")
    return effect


def _refused_each_time(make_effect) -> Effect:
    return queued(make_effect, "planned", Reason.ATTEMPTS_EXHAUSTED, "pay-104:charge", attempt=3)


def _same_charge(make_effect) -> Effect:
    effect = queued(
        make_effect, "confirmed", Reason.DUPLICATE, "pay-105:charge", provider_ref="ch_105"
    )
    lookup(effect, "duplicate", provider_ref="ch_105", refs=["ch_105"])
    return effect


def _charged_twice(make_effect) -> Effect:
    effect = queued(
        make_effect, "confirmed", Reason.DUPLICATE, "pay-106:charge", provider_ref="ch_106"
    )
    lookup(effect, "duplicate", provider_ref="ch_106", refs=["ch_106", "ch_106b"])
    return effect


def _differs(make_effect) -> Effect:
    return _mismatched(make_effect, 107, "confirmed", "1.10", "succeeded")


def _exhausted(make_effect) -> Effect:
    return queued(make_effect, "unknown", Reason.ATTEMPTS_EXHAUSTED, "pay-108:charge", attempt=3)


# (decision, the item, words the dialog says, the effect's status after)
CASES = [
    ("confirm", _found, "as done by the provider (ref ch_101)", "confirmed"),
    ("fail", _declined, "as failed", "failed"),
    ("retry", _absent, "back to planned", "planned"),
    ("cancel", _refused_each_time, "never be sent", "cancelled"),
    ("not_duplicate", _same_charge, "not a duplicate", "confirmed"),
    ("accept_record", _differs, "Accept the provider's record", "confirmed"),
    ("extra_attempt", _exhausted, "one more attempt (4 in all)", "planned"),
    ("compensate", _charged_twice, "undo it", "confirmed"),
]


def console_errors(page: Page) -> list[str]:
    errors: list[str] = []

    def keep(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", keep)
    return errors


def resolve_from_queue(page: Page, effect: Effect, action: str) -> tuple[Tally, str]:
    """Queue → open the item → send the suggested decision → confirm in the dialog. Returns
    the tally and what the dialog asked."""
    tally = Tally(page)
    page.goto("/queue/")
    row = page.locator(f'tr.queue-row[data-effect="{effect.id}"]')
    tally.click(row.locator("a[data-open]"))
    expect(page).to_have_url(re.compile(f"/effects/{effect.id}/$"))
    decision = page.locator(f"#decide-{action}")
    # The suggested decision is open and filled in: nothing to type.
    expect(decision).to_have_attribute("open", "")
    expect(decision).to_have_class(re.compile("is-suggested"))
    tally.click(decision.get_by_role("button", name=re.compile("^Record decision")))
    dialog = decision.locator("dialog.decide-dialog")
    expect(dialog).to_be_visible()
    asked = dialog.locator(".decide-question").inner_text()
    tally.click(dialog.locator("[data-dialog-confirm]"))
    return tally, asked


@pytest.mark.parametrize(("action", "make", "says", "after"), CASES, ids=[c[0] for c in CASES])
def test_each_decision_takes_at_most_three_actions_from_the_queue(
    signed_in, olga, make_effect, action, make, says, after
):
    effect = make(make_effect)
    page = signed_in(olga)
    errors = console_errors(page)

    tally, asked = resolve_from_queue(page, effect, action)

    assert tally.actions <= MOST
    # The dialog named the decision and the effect, in the decision's own words.
    assert effect.effect_key in asked and says.lower() in asked.lower(), asked
    result = page.locator("#decision-result")
    expect(result).to_contain_text(f"Decision recorded ({action})")
    # Focus is on the result, not on <body>, and the result is in view.
    expect(result).to_be_focused()
    expect(result).to_be_in_viewport()
    effect.refresh_from_db()
    assert effect.status == after
    item = ReviewItem.objects.get(effect=effect)
    assert item.resolved_by == olga
    [decision] = Effect.objects.filter(parent=effect, kind=Kind.DECISION)
    assert item.decision_id == decision.id and decision.provenance["action"] == action
    assert errors == []


def test_backing_out_of_the_dialog_records_nothing(signed_in, olga, make_effect):
    effect = _found(make_effect)
    page = signed_in(olga)
    page.goto(f"/effects/{effect.id}/")
    decision = page.locator("#decide-confirm")
    decision.get_by_role("button", name=re.compile("^Record decision")).click()
    dialog = decision.locator("dialog.decide-dialog")
    expect(dialog).to_be_visible()
    dialog.locator("[data-dialog-cancel]").click()
    expect(dialog).to_be_hidden()
    page.keyboard.press("Escape")
    expect(page.locator("#effect-status")).to_have_text("unknown")
    assert not Effect.objects.filter(parent=effect, kind=Kind.DECISION).exists()

    # The dialog asks with the reference the operator typed, not the one it was given.
    decision.get_by_role("textbox", name="Provider reference").fill("ch_typed")
    decision.get_by_role("button", name=re.compile("^Record decision")).click()
    expect(dialog.locator(".decide-question")).to_contain_text("(ref ch_typed)")
    dialog.locator("[data-dialog-confirm]").click()
    expect(page.locator("#effect-status")).to_have_text("confirmed")
    effect.refresh_from_db()
    assert effect.provider_ref == "ch_typed"


def test_decide_in_the_address_opens_that_decision_instead(signed_in, olga, make_effect):
    effect = _found(make_effect)  # suggests confirm
    page = signed_in(olga)
    page.goto(f"/effects/{effect.id}/?decide=fail")
    expect(page.locator("#decide-fail")).to_have_attribute("open", "")
    expect(page.locator("#decide-confirm")).not_to_have_attribute("open", "")
    # A decision the effect does not offer opens the suggested one.
    page.goto(f"/effects/{effect.id}/?decide=compensate")
    expect(page.locator("#decide-confirm")).to_have_attribute("open", "")
    expect(page.locator("#decide-compensate")).to_have_count(0)
    for action in ("confirm", "fail"):
        expect(page.locator(f'summary[data-decide="{action}"]')).to_have_count(1)


def test_deciding_over_a_colleagues_hold_asks_first(signed_in, olga, otto, make_effect):
    effect = _found(make_effect)
    ReviewItem.objects.filter(effect=effect).update(
        assignee=otto, held_at=datetime(2026, 1, 5, 10, 2, tzinfo=UTC)
    )
    page = signed_in(olga)
    page.goto(f"/effects/{effect.id}/")
    decision = page.locator("#decide-confirm")
    decision.get_by_role("button", name=re.compile("^Record decision")).click()
    dialog = decision.locator("dialog.decide-dialog")
    expect(dialog.locator(".decide-held")).to_contain_text("otto is working on this since 10:02")
    expect(dialog.locator(".decide-held")).to_contain_text("decide anyway?")
    dialog.locator("[data-dialog-confirm]").click()
    expect(page.locator("#decision-result")).to_be_focused()
    [decision_effect] = Effect.objects.filter(parent=effect, kind=Kind.DECISION)
    # Recorded under the name decisions were first stored with.
    assert decision_effect.request["over_claim"] is True


def test_the_effect_page_fits_a_phone(signed_in, olga, make_effect):
    effect = _differs(make_effect)
    for n in range(6):
        lookup(effect, "inconclusive", detail=f"timeout {n} " + "x" * 200)
    page = signed_in(olga)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/effects/{effect.id}/")
    expect(page.locator("#decide-accept_record")).to_have_attribute("open", "")
    page.locator("#decide-fail summary").click()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    short = page.evaluate(
        """() => [...document.querySelectorAll(
                 'main button, main input:not([type=hidden]), main select, main textarea,'
                 + ' main summary')]
            .filter(el => el.offsetParent !== null)
            .map(el => [el.outerHTML.slice(0, 60), el.getBoundingClientRect().height])
            .filter(([, h]) => h < 24)"""
    )
    assert short == []
    # The decision and its dialog fit too.
    decision = page.locator("#decide-accept_record")
    decision.get_by_role("button", name=re.compile("^Record decision")).click()
    dialog = decision.locator("dialog.decide-dialog")
    expect(dialog).to_be_visible()
    box = dialog.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    dialog.locator("[data-dialog-confirm]").click()
    expect(page.locator("#decision-result")).to_be_in_viewport()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
