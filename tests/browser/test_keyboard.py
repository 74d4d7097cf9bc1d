"""The keyboard in Chromium (static/app.js): j/k move through the queue, o opens, c/f/r/x go to
a decision, ? shows every shortcut; nothing fires while typing; after a decision focus lands on
its result, in view; a swap nobody asked for leaves focus alone."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from ledger.models import Effect, Reason
from ledger.rules.reviewqueue import open_review

pytestmark = pytest.mark.browser

CURRENT = "tr.queue-row.is-current"


@pytest.fixture
def queued(make_effect) -> list[Effect]:
    """Three unknown charges in the review queue."""
    effects = []
    for n in range(3):
        effect = make_effect("unknown", attempt=1, effect_key=f"order-{n}:charge")
        open_review(effect.id, Reason.INCONCLUSIVE)
        effects.append(effect)
    return effects


def row_effects(page: Page) -> list[str]:
    """The effect ids of the queue's rows, top to bottom."""
    return page.locator("tr.queue-row").evaluate_all("rows => rows.map(r => r.dataset.effect)")


def current_effect(page: Page) -> str:
    return page.locator(CURRENT).get_attribute("data-effect")


def focused_open_link_of_current_row(page: Page) -> bool:
    return page.evaluate(
        "() => document.activeElement.matches('tr.queue-row.is-current a[data-open]')"
    )


def test_j_and_k_move_the_current_row_and_o_opens_it(signed_in, olga, queued):
    page = signed_in(olga)
    page.goto("/queue/")
    order = row_effects(page)
    assert sorted(order) == sorted(str(e.id) for e in queued)
    expect(page.locator(CURRENT)).to_have_count(0)

    page.keyboard.press("j")
    assert current_effect(page) == order[0] and focused_open_link_of_current_row(page)
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("j")  # past the last row: stays on it
    assert current_effect(page) == order[2] and focused_open_link_of_current_row(page)
    page.keyboard.press("k")
    assert current_effect(page) == order[1]
    expect(page.locator(CURRENT)).to_have_count(1)

    page.keyboard.press("o")

    expect(page).to_have_url(re.compile(rf"/effects/{order[1]}/$"))


@pytest.mark.parametrize(
    ("key", "action"), [("c", "confirm"), ("f", "fail"), ("r", "retry"), ("x", "cancel")]
)
def test_a_decision_key_on_the_queue_opens_the_current_rows_effect_at_that_decision(
    signed_in, olga, queued, key, action
):
    page = signed_in(olga)
    page.goto("/queue/")
    page.keyboard.press("j")
    first = current_effect(page)

    page.keyboard.press(key)

    expect(page).to_have_url(re.compile(rf"/effects/{first}/\?decide={action}$"))


def test_a_decision_key_on_the_effect_page_opens_that_decision_at_the_field_it_needs(
    signed_in, olga, queued
):
    page = signed_in(olga)
    page.goto(f"/effects/{queued[0].id}/")
    decision = page.locator("#decide-fail")
    expect(decision.locator("summary")).to_be_visible()

    page.keyboard.press("f")

    expect(decision).to_have_attribute("open", "")
    # Mark failed needs evidence first (the reason after it): the focus is there, and the
    # letter that opened it was not typed into it.
    evidence = decision.get_by_role("textbox", name=re.compile("Evidence"))
    expect(evidence).to_be_focused()
    expect(evidence).to_have_value("")
    # Pressed again from outside a field, the open decision stays open (no second toggle).
    page.locator("h1").click()
    page.keyboard.press("f")
    expect(decision).to_have_attribute("open", "")
    expect(evidence).to_be_focused()


def test_keys_typed_into_a_field_or_with_a_modifier_are_not_shortcuts(signed_in, olga, queued):
    page = signed_in(olga)
    page.goto(f"/effects/{queued[0].id}/")
    page.keyboard.press("f")
    reason = page.locator("#decide-fail").get_by_role("textbox", name=re.compile("Reason"))
    reason.click()

    page.keyboard.type("x c r")

    expect(reason).to_have_value("x c r")
    expect(page).to_have_url(re.compile(rf"/effects/{queued[0].id}/$"))
    expect(reason).to_be_focused()

    page.goto("/queue/")
    page.keyboard.press("Control+j")
    page.keyboard.press("Alt+j")
    expect(page.locator(CURRENT)).to_have_count(0)


def test_question_mark_lists_every_shortcut_and_escape_closes_it(signed_in, olga, queued):
    page = signed_in(olga)
    page.goto("/queue/")
    help_ = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(help_).to_be_hidden()

    page.keyboard.press("?")

    expect(help_).to_be_visible()
    keys = ("j", "k", "o", "c", "f", "r", "x", "u", "a", "d", "n", "p", "m", "Ctrl", "?", "Esc")
    for key in keys:
        expect(help_.locator("kbd", has_text=re.compile(rf"^{re.escape(key)}$"))).to_have_count(1)
    # While the help is open the letters do nothing behind it.
    page.keyboard.press("j")
    expect(page.locator(CURRENT)).to_have_count(0)
    page.keyboard.press("Escape")
    expect(help_).to_be_hidden()
    page.keyboard.press("j")
    expect(page.locator(CURRENT)).to_have_count(1)


def test_the_skip_links_reach_the_content_and_the_rows(signed_in, olga, queued):
    page = signed_in(olga)
    page.goto("/halts/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main#content")).to_be_focused()

    page.goto("/queue/")
    page.get_by_role("link", name="Skip to rows").focus()
    page.keyboard.press("Enter")
    # The fragment lands in the address once the browser has followed the link: wait for it.
    expect(page).to_have_url(re.compile(r"/queue/#rows$"))
    expect(page.locator("#rows")).to_be_focused()


def test_after_a_decision_focus_is_on_its_result_and_in_view(signed_in, olga, queued):
    page = signed_in(olga)
    page.set_viewport_size({"width": 390, "height": 844})
    effect = queued[0]
    page.goto(f"/effects/{effect.id}/?decide=fail")
    form = page.locator("#decide-fail")
    form.get_by_role("textbox", name=re.compile("Evidence")).fill("Dashboard: declined")
    form.get_by_role("textbox", name=re.compile("Reason")).fill("Provider says declined")
    for box in form.get_by_role("checkbox").all():
        if box.is_visible():
            box.check()
    form.get_by_role("button", name=re.compile("^Record decision")).click()
    page.locator("dialog.decide-dialog[open]").get_by_role("button").first.click()

    result = page.locator("#decision-result")
    expect(result).to_be_focused()
    expect(result).to_be_in_viewport(ratio=1)
    effect.refresh_from_db()
    assert effect.status == "failed"


def test_a_refresh_nobody_asked_for_leaves_focus_where_it_is(signed_in, olga, settings, queued):
    settings.LEDGER_METRICS_REFRESH = 1
    page = signed_in(olga)
    mode = page.get_by_label("Mode")
    mode.focus()
    marker = page.evaluate("() => document.querySelector('#panels').dataset.seen = 'old'")
    assert marker == "old"

    # The overview polls #panels; the swapped-in panels have no marker.
    expect(page.locator("#panels:not([data-seen])")).to_have_count(1, timeout=15_000)

    expect(mode).to_be_focused()


def test_the_queues_live_refresh_keeps_the_current_row_and_its_focus(
    signed_in, olga, queued, make_effect
):
    page = signed_in(olga)
    page.goto("/queue/")
    page.keyboard.press("j")
    page.keyboard.press("j")
    chosen = current_effect(page)

    newcomer = make_effect("unknown", attempt=1, effect_key="order-9:charge")
    open_review(newcomer.id, Reason.INCONCLUSIVE)
    # The queue polls every few seconds and swaps its rows when they changed.
    expect(page.locator("tr.queue-row")).to_have_count(4, timeout=15_000)

    expect(page.locator(CURRENT)).to_have_count(1)
    assert current_effect(page) == chosen and focused_open_link_of_current_row(page)
    page.keyboard.press("j")
    assert current_effect(page) == row_effects(page)[row_effects(page).index(chosen) + 1]


def test_a_swap_with_nothing_to_announce_leaves_focus_in_the_swapped_row(signed_in, olga, queued):
    page = signed_in(olga)
    page.goto("/queue/")
    row = page.locator("tr.queue-row").first
    effect = row.get_attribute("data-effect")

    row.get_by_role("button", name="Hold").click()

    expect(page.locator(f'tr.queue-row[data-effect="{effect}"]')).to_contain_text("olga")
    # Focus moves once the swap has settled, a moment after the new row is in the page.
    page.wait_for_function(
        f"() => document.activeElement.closest('tr.queue-row')?.dataset.effect === '{effect}'",
        timeout=5_000,
    )
