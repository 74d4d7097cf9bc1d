"""A phone, in Chromium at 390×844: no page scrolls sideways, and every visible control
(button, link styled as a button, field, disclosure) is at least 24 px tall (WCAG 2.2 target
size). Wide tables scroll inside their own box instead of widening the page."""

from __future__ import annotations

import pytest

from tests.browser.pages import Visits, ledger_with_everything

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
# Controls on the page that a person can see and touch, and how tall each is.
SMALL_CONTROLS = """() => [...document.querySelectorAll(
    'button, a.button, input, select, textarea, summary')].filter(el => {
        const box = el.getBoundingClientRect();
        if (el.type === 'hidden' || box.width === 0 || box.height === 0) return false;
        if (getComputedStyle(el).visibility === 'hidden') return false;
        return box.height < 24;
    }).map(el => `${el.outerHTML.slice(0, 100)} is ${el.getBoundingClientRect().height} px`)"""


def test_no_page_scrolls_sideways_and_every_control_is_at_least_24px(
    signed_in, make_effect, alice, olga
):
    paths = ledger_with_everything(make_effect, alice)
    page = signed_in(olga)
    page.set_viewport_size(PHONE)
    visits = Visits(page)
    too_wide, too_small = {}, {}

    for path in paths:
        visits.visit(path)
        # Open every disclosure, so that the controls inside are measured too.
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            too_wide[path] = width
        if small := page.evaluate(SMALL_CONTROLS):
            too_small[path] = small

    assert too_wide == {}
    assert too_small == {}
    assert visits.problems == []


def test_the_header_wraps_and_a_wide_table_scrolls_inside_its_box(
    signed_in, make_effect, alice, olga
):
    ledger_with_everything(make_effect, alice)
    page = signed_in(olga)
    page.set_viewport_size(PHONE)
    page.goto("/limits/")

    nav = page.get_by_role("navigation", name="Main")
    box = nav.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    assert nav.get_by_role("link", name="Approvals").is_visible()
    table = page.locator("#limits")
    assert table.evaluate("t => t.scrollWidth > t.clientWidth")  # it has more to show…
    assert table.evaluate("t => getComputedStyle(t).overflowX") == "auto"  # …by scrolling
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]


def test_the_sign_in_page_fits_a_phone(open_page, olga):
    page = open_page()
    page.set_viewport_size(PHONE)
    visits = Visits(page)

    visits.visit("/login/")

    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate(SMALL_CONTROLS) == []
    assert visits.problems == []
