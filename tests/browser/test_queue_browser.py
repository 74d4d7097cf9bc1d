"""The review queue in Chromium: what a row shows, the blank assign picker, bulk selection and
its confirmation, the live refresh that keeps a selection, and the 390 px phone layout."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from ledger.models import Effect, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.queue.holds import hold_item
from tests.factories import lookup_found

pytestmark = pytest.mark.browser


def queued(make_effect, status: str = "unknown", **fields) -> Effect:
    effect = make_effect(status, **({"attempt": 1} if status == "unknown" else {}), **fields)
    open_review(effect.id, Reason.INCONCLUSIVE)
    return effect


def row_of(page: Page, effect: Effect):
    return page.locator(f'tr.queue-row[data-effect="{effect.id}"]')


def test_a_row_shows_age_stake_and_suggestion_and_the_picker_starts_blank(
    signed_in, olga, otto, make_effect
):
    effect = make_effect("unknown", attempt=1, target="acct_row", effect_key="order-9:charge")
    Effect.objects.filter(pk=effect.pk).update(
        amount_minor=4200, currency="EUR", created_at=effect.created_at - timedelta(hours=25)
    )
    lookup_found(effect, "ch_row_1")
    open_review(effect.id, Reason.INCONCLUSIVE)
    page = signed_in(olga)
    page.goto("/queue/")
    row = row_of(page, effect)
    expect(row.locator("td.stake")).to_contain_text("42.00 EUR")
    expect(row.locator("td.stake")).to_contain_text("acct_row")
    expect(row.locator(".effect-age")).to_have_text("25 h")
    suggest = row.locator("a[data-suggest]")
    expect(suggest).to_have_attribute("data-suggest", "confirm")
    expect(suggest).to_have_attribute("href", f"/effects/{effect.id}/?decide=confirm")
    # The picker starts blank; Assign without a choice sends nothing (the field is required).
    picker = row.get_by_label("Assign to")
    expect(picker).to_have_value("")
    row.get_by_role("button", name="Assign").click()
    expect(row.locator("td.who")).to_have_text("—")
    assert ReviewItem.objects.get(effect=effect).assignee is None
    picker.select_option(label="otto")
    row.get_by_role("button", name="Assign").click()
    expect(row_of(page, effect).locator("td.who")).to_have_text("otto")
    # The skip link, first in the page's content, lands on the rows.
    page.goto("/queue/")
    skip = page.get_by_role("link", name="Skip to rows")
    skip.focus()
    skip.press("Enter")
    expect(page).to_have_url(re.compile(r"#rows$"))


def test_bulk_selection_asks_once_then_decides_each_item(signed_in, olga, make_effect):
    effects = [queued(make_effect, "planned") for _ in range(3)]
    page = signed_in(olga)
    page.goto("/queue/")
    page.get_by_label("Select all on this page").check()
    boxes = page.locator('input[name="items"]')
    expect(boxes).to_have_count(3)
    for i in range(3):
        expect(boxes.nth(i)).to_be_checked()
    boxes.nth(2).uncheck()
    expect(page.get_by_label("Select all on this page")).not_to_be_checked()
    boxes.nth(2).check()
    page.get_by_label("Action for the selected items").select_option("cancel")
    page.get_by_label("Reason (one for all)").fill("Run abandoned")
    page.get_by_role("button", name="Review and apply…").click()
    expect(page.get_by_role("heading", name="Cancel: 3 items?")).to_be_visible()
    assert {Effect.objects.get(pk=e.pk).status for e in effects} == {"planned"}
    page.get_by_role("button", name="Cancel: 3 items").click()
    expect(page.locator("#bulk-summary")).to_contain_text("3 done")
    assert {Effect.objects.get(pk=e.pk).status for e in effects} == {"cancelled"}
    for effect in effects:
        expect(page.locator(f'a[href="/effects/{effect.id}/"]')).to_be_visible()


def test_the_queue_updates_itself_when_someone_else_acts_and_keeps_the_selection(
    signed_in, olga, otto, make_effect
):
    first, second = queued(make_effect), queued(make_effect)
    page = signed_in(olga)
    page.goto("/queue/")
    expect(page.locator(".live")).to_contain_text(re.compile(r"Live: updated \d\d:\d\d:\d\d"))
    row_of(page, first).locator('input[name="items"]').check()
    polls: list[int] = []
    page.on(
        "response",
        lambda r: polls.append(r.status) if "live=" in r.url else None,
    )
    page.wait_for_timeout(4500)
    assert 204 in polls  # nothing changed: nothing swapped
    hold_item(ReviewItem.objects.get(effect=second), otto)
    expect(row_of(page, second).locator("td.who")).to_have_text("otto", timeout=9000)
    expect(row_of(page, first).locator('input[name="items"]')).to_be_checked()
    expect(row_of(page, second).locator('input[name="items"]')).not_to_be_checked()


def test_at_390_px_the_queue_never_scrolls_sideways_and_controls_are_24_px(
    signed_in, olga, make_effect
):
    for n in range(3):
        effect = queued(make_effect, target=f"acct_{'very_long_target_' * 3}{n}")
        Effect.objects.filter(pk=effect.pk).update(amount_minor=123456789, currency="EUR")
    page = signed_in(olga)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/queue/")
    expect(page.locator("tr.queue-row")).to_have_count(3)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    short = page.evaluate(
        """() => [...document.querySelectorAll(
                'main button, main select, main input:not([type=hidden]), main a.button')]
            .filter(el => el.offsetParent !== null)
            .map(el => [el.name || el.textContent.trim(), el.getBoundingClientRect().height])
            .filter(([, h]) => h < 24)"""
    )
    assert short == []
    # The rows are cards: a row's cells stack, each as wide as the row.
    widths = (
        page.locator("tr.queue-row")
        .first.locator("td")
        .evaluate_all("tds => tds.map(td => Math.round(td.getBoundingClientRect().width))")
    )
    assert len(set(widths)) == 1, widths
