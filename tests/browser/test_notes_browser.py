"""Two operators on one effect, each in their own browser: notes, the claim and decisions reach
the other's open page within seconds without a reload, and typing is never thrown away."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from ledger.models import Effect, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import Ask, decide
from reviews.models import ReviewNote

pytestmark = pytest.mark.browser

# Three polls at most: the page checks every 3 s.
WITHIN_MS = 9_000


@pytest.fixture
def unknown(make_effect) -> Effect:
    effect = make_effect("unknown", attempt=1, effect_key="order-9:charge")
    open_review(effect.id, Reason.INCONCLUSIVE)
    return effect


def on_effect(page: Page, effect: Effect) -> Page:
    page.goto(f"/effects/{effect.id}/")
    expect(page.locator("#live-note")).to_have_text("Live: this page checks for changes every 3 s.")
    # Survives only as long as the document does: gone after a reload.
    page.evaluate("() => { window.notReloaded = true; }")
    return page


def not_reloaded(page: Page) -> bool:
    return page.evaluate("() => window.notReloaded === true")


def test_a_note_from_another_operator_appears_without_a_reload(signed_in, olga, otto, unknown):
    olga_page = on_effect(signed_in(olga), unknown)
    otto_page = on_effect(signed_in(otto), unknown)

    otto_page.get_by_label("Add a note").fill("Bank says the charge is pending.")
    otto_page.get_by_role("button", name="Add note").click()
    added = otto_page.locator("#notes li").last
    expect(added).to_contain_text("Bank says the charge is pending.")
    expect(added).to_be_focused()
    expect(otto_page.get_by_label("Add a note")).to_have_value("")

    expect(olga_page.locator("#notes")).to_contain_text(
        "Bank says the charge is pending.", timeout=WITHIN_MS
    )
    expect(olga_page.locator("#live-banner")).to_contain_text("otto added a note at")
    expect(olga_page.locator("#live-banner")).to_contain_text("The page below is up to date.")
    assert not_reloaded(olga_page)


def test_a_hold_shows_on_the_other_page_and_the_holder_releases_it(signed_in, olga, otto, unknown):
    olga_page = on_effect(signed_in(olga), unknown)
    otto_page = on_effect(signed_in(otto), unknown)

    otto_page.get_by_role("button", name="Hold").click()
    expect(otto_page.locator("#held-by")).to_contain_text(
        "You are working on this since", timeout=WITHIN_MS
    )
    expect(olga_page.locator("#held-by")).to_contain_text(
        "otto is working on this since", timeout=WITHIN_MS
    )
    expect(olga_page.get_by_role("button", name="Release")).to_have_count(0)

    otto_page.get_by_role("button", name="Release").click()
    expect(otto_page.locator("#held-by")).to_have_text("Nobody is working on this.")
    expect(olga_page.locator("#held-by")).to_have_text(
        "Nobody is working on this.", timeout=WITHIN_MS
    )
    assert ReviewItem.objects.get(effect=unknown).assignee is None
    assert not_reloaded(olga_page) and not_reloaded(otto_page)


def test_a_decision_elsewhere_refreshes_an_idle_page(signed_in, olga, otto, unknown):
    olga_page = on_effect(signed_in(olga), unknown)

    decide(unknown.id, Ask("fail", "declined", unknown.version, evidence="bank"), user=otto)

    expect(olga_page.locator("#effect-status")).to_have_text("failed", timeout=WITHIN_MS)
    expect(olga_page.locator("#live-banner")).to_contain_text("otto decided fail at")
    expect(olga_page.locator("#live-banner")).to_contain_text("now failed")
    assert not_reloaded(olga_page)


def test_typing_is_kept_and_the_banner_offers_the_latest(signed_in, olga, otto, unknown):
    olga_page = on_effect(signed_in(olga), unknown)
    olga_page.get_by_label("Add a note").fill("half-written thought")
    olga_page.locator("h1").click()  # focus leaves the field; the typing stays

    decide(unknown.id, Ask("fail", "declined", unknown.version, evidence="bank"), user=otto)

    banner = olga_page.locator("#live-banner")
    expect(banner).to_contain_text("otto decided fail at", timeout=WITHIN_MS)
    expect(banner.get_by_role("link", name="Show the latest")).to_be_visible()
    olga_page.wait_for_timeout(4_000)  # another poll: still no refresh over the typing
    expect(olga_page.get_by_label("Add a note")).to_have_value("half-written thought")
    expect(olga_page.locator("#effect-status")).to_have_text("unknown")
    assert not_reloaded(olga_page)

    banner.get_by_role("link", name="Show the latest").click()
    expect(olga_page.locator("#effect-status")).to_have_text("failed")
    assert not not_reloaded(olga_page)


def test_an_auditor_s_page_stays_live_and_offers_no_note_form(signed_in, audrey, otto, unknown):
    audrey_page = on_effect(signed_in(audrey), unknown)
    expect(audrey_page.get_by_label("Add a note")).to_have_count(0)

    item = ReviewItem.objects.get(effect=unknown)
    ReviewNote.objects.create(item=item, effect_id=unknown.id, author=otto, text="for the record")

    expect(audrey_page.locator("#notes")).to_contain_text("for the record", timeout=WITHIN_MS)
    assert not_reloaded(audrey_page)
