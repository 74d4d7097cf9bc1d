"""Operators in Chromium: sign in, find an item, decide on it; races, keyboard, no JavaScript,
the content security policy and the overview's refresh."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from ledger.models import Effect, Reason, ReviewItem
from ledger.models.states import Kind
from ledger.rules.reviewqueue import open_review
from tests.browser.conftest import (
    SCREENSHOTS,
    fill_decision,
    log_in,
    nav,
    path_of,
)
from tests.helpers import PASSWORD

pytestmark = pytest.mark.browser


@pytest.fixture
def unknown(make_effect) -> Effect:
    """An unknown charge in the review queue, one attempt of three used."""
    effect = make_effect("unknown", attempt=1, effect_key="order-7:charge")
    open_review(effect.id, Reason.INCONCLUSIVE)
    return effect


@pytest.fixture
def elsewhere(make_effect) -> Effect:
    """Another queued effect, in another status, that the status filter must hide."""
    effect = make_effect("awaiting_confirmation", attempt=1, effect_key="order-8:charge")
    open_review(effect.id, Reason.STALE)
    return effect


def item_row(page: Page, effect: Effect):
    item = ReviewItem.objects.get(effect=effect)
    return page.locator(f"tr#item-{item.pk}")


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind=Kind.DECISION))


def focused(page: Page) -> dict:
    """What has the keyboard focus, and how its focus ring looks."""
    return page.evaluate(
        """() => {
            const el = document.activeElement;
            const style = getComputedStyle(el);
            return {tag: el.tagName.toLowerCase(), id: el.id, text: el.textContent.trim(),
                    inMain: el.closest('main') !== null,
                    outline: style.outlineStyle, outlineWidth: parseFloat(style.outlineWidth)};
        }"""
    )


def send_and_confirm(page: Page, action: str) -> str:
    """Send the decision and confirm it in its dialog; returns what the dialog asked."""
    decision = page.locator(f"#decide-{action}")
    decision.get_by_role("button", name=f"Record decision: {action}").click()
    dialog = decision.locator("dialog.decide-dialog")
    expect(dialog).to_be_visible()
    asked = dialog.locator(".decide-question").inner_text()
    dialog.locator("[data-dialog-confirm]").click()
    return asked


def assert_focus_ring(page: Page) -> None:
    ring = focused(page)
    assert ring["outline"] != "none" and ring["outlineWidth"] >= 2, ring


def test_an_operator_confirms_an_unknown_effect_found_in_the_queue(
    open_page, olga, unknown, elsewhere
):
    page = open_page()
    log_in(page, olga)

    nav(page, "Review queue")
    expect(item_row(page, elsewhere)).to_be_visible()
    page.get_by_label("Effect status").select_option("unknown")
    # htmx swaps the results in place and puts the filter in the address.
    expect(item_row(page, elsewhere)).to_have_count(0)
    expect(page).to_have_url(re.compile(r"[?&]status=unknown(&|$)"))
    row = item_row(page, unknown)
    expect(row).to_have_attribute("data-effect", str(unknown.id))
    row.get_by_role("button", name="Hold").click()
    # The row is swapped in place: olga holds it now, and it offers no second hold.
    expect(row.locator("td.who")).to_have_text("olga")
    expect(row.get_by_role("button", name="Hold")).to_have_count(0)
    assert ReviewItem.objects.get(effect=unknown).assignee == olga
    row.locator("a[data-open]").click()

    expect(page).to_have_url(re.compile(f"/effects/{unknown.id}/$"))
    expect(page.locator("#effect-status")).to_have_text("unknown")
    fill_decision(
        page,
        "confirm",
        ref="ch_3Pq9Z",
        evidence="Provider dashboard shows ch_3Pq9Z captured",
        reason="Charge found at the provider",
    )
    asked = send_and_confirm(page, "confirm")

    expect(page.locator("#effect-status")).to_have_text("confirmed")
    assert asked == "Confirm order-7:charge as done by the provider (ref ch_3Pq9Z)?"
    expect(page.locator("#decision-result")).to_contain_text("Decision recorded (confirm)")
    decision_row = page.locator("#linked tr.decision")
    expect(decision_row).to_contain_text("decision: confirm")
    expect(decision_row).to_contain_text("operator:olga")
    expect(decision_row).to_contain_text("evidence: Provider dashboard shows ch_3Pq9Z captured")
    expect(decision_row).to_contain_text("unknown → confirmed")
    moved = page.locator("#timeline tr", has_text="unknown → confirmed")
    expect(moved).to_contain_text("operator:olga")
    expect(moved).to_contain_text("Charge found at the provider")

    nav(page, "Review queue")
    expect(item_row(page, elsewhere)).to_be_visible()
    expect(item_row(page, unknown)).to_have_count(0)

    (decision,) = decisions_on(unknown)
    assert decision.provenance["actor"] == "operator:olga"
    unknown.refresh_from_db()
    assert (unknown.status, unknown.provider_ref) == ("confirmed", "ch_3Pq9Z")
    item = ReviewItem.objects.get(effect=unknown)
    assert item.resolved_by == olga and item.decision_id == decision.id


def test_two_operators_deciding_at_once_record_one_decision_and_the_other_learns_who(
    signed_in, olga, otto, unknown
):
    pages = {"olga": signed_in(olga), "otto": signed_in(otto)}
    for name, page in pages.items():
        page.goto(f"/effects/{unknown.id}/")
        fill_decision(
            page, "confirm", ref=f"ref-{name}", evidence=f"{name} saw it", reason=f"{name} checked"
        )
        page.locator("#decide-confirm").get_by_role(
            "button", name="Record decision: confirm"
        ).click()
    # Both confirm before either answer is in: the two requests race on the server.
    for page in pages.values():
        page.locator("#decide-confirm dialog [data-dialog-confirm]").click()
    for page in pages.values():
        expect(page.locator("#effect-status")).to_have_text("confirmed")

    (decision,) = decisions_on(unknown)
    winner = decision.provenance["actor"].removeprefix("operator:")
    (loser,) = set(pages) - {winner}
    expect(pages[loser].locator("#decision-problem")).to_contain_text(
        f"Already decided by {winner}"
    )
    # The loser is told their evidence was kept, and has the focus on what they are told.
    expect(pages[loser].locator("#decision-problem")).to_contain_text("kept as a note")
    expect(pages[loser].locator("#decision-problem")).to_be_focused()
    expect(pages[winner].locator("#decision-problem")).to_have_count(0)
    unknown.refresh_from_db()
    assert unknown.provider_ref == f"ref-{winner}"
    assert ReviewItem.objects.get(effect=unknown).resolved_by.username == winner


def test_the_keyboard_reaches_the_login_form_and_a_decision_in_order(open_page, olga, unknown):
    page = open_page()
    page.goto("/login/")
    # Django's login form puts the focus in Username; one step back is the skip link, the
    # first stop of the page.
    username = page.get_by_label("Username")
    expect(username).to_be_focused()
    page.keyboard.press("Shift+Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    assert_focus_ring(page)
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/login/#content$"))
    page.keyboard.press("Tab")
    expect(username).to_be_focused()
    assert_focus_ring(page)
    page.keyboard.type("olga")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Password")).to_be_focused()
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Sign in")).to_be_focused()
    assert_focus_ring(page)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()

    # The effect page from its top: the skip link first, then past the navigation the first
    # control of the page's content (the facts' link to the run's recovery plan), then the
    # decisions, the suggested one (retry here) first.
    page.goto(f"/effects/{unknown.id}/")
    page.keyboard.press("Tab")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"#content$"))
    page.keyboard.press("Tab")
    assert focused(page)["inMain"], focused(page)
    expect(page.get_by_role("link", name="what recovery will do for this run")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("#decide-retry summary")).to_be_focused()
    assert_focus_ring(page)

    # ?decide=confirm (where the queue's letter and an email link lead) opens the confirmation's
    # form with the focus on its first field that needs input; one step back is its summary.
    page.goto(f"/effects/{unknown.id}/?decide=confirm")
    expect(page.locator("#decide-confirm")).to_have_attribute("open", "")
    page.keyboard.press("Shift+Tab")
    expect(page.locator("#decide-confirm summary")).to_be_focused()
    assert_focus_ring(page)
    page.keyboard.press("Shift+Tab")
    assert focused(page)["inMain"], focused(page)

    decision = page.locator("#decide-confirm")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    for n, label in enumerate(("Provider reference", "Evidence", "Reason")):
        if n:
            page.keyboard.press("Tab")
        expect(decision.get_by_role("textbox", name=label)).to_be_focused()
        assert_focus_ring(page)
        page.keyboard.type(f"{label} typed")
    page.keyboard.press("Tab")
    expect(decision.get_by_role("button", name="Record decision: confirm")).to_be_focused()
    page.keyboard.press("Enter")
    # The dialog opens with its confirm button focused: Enter confirms.
    confirm = decision.locator("dialog [data-dialog-confirm]")
    expect(confirm).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#effect-status")).to_have_text("confirmed")
    expect(page.locator("#decision-result")).to_be_focused()
    assert decisions_on(unknown)[0].provenance["reason"] == "Reason typed"


def test_without_javascript_an_operator_signs_in_filters_and_decides(
    signed_in, olga, unknown, elsewhere
):
    page = signed_in(olga, java_script_enabled=False)

    nav(page, "Review queue")
    page.get_by_label("Effect status").select_option("unknown")
    page.get_by_role("button", name="Apply", exact=True).click()
    expect(page).to_have_url(re.compile(r"[?&]status=unknown(&|$)"))
    expect(item_row(page, elsewhere)).to_have_count(0)
    item_row(page, unknown).locator("a[data-open]").click()

    fill_decision(
        page, "confirm", ref="ch_nojs", evidence="Seen in the provider's export", reason="Found"
    )
    # Without a dialog, the server asks once: a confirmation step, which records nothing yet.
    with page.expect_navigation():
        page.get_by_role("button", name="Record decision: confirm").click()
    step = page.locator("#confirm-step")
    expect(step).to_contain_text("Confirm order-7:charge as done by the provider (ref ch_nojs)?")
    assert decisions_on(unknown) == []
    with page.expect_navigation():
        step.get_by_role("button", name="Yes, record").click()
    # Redirected after the post, to the page that names the decision it recorded.
    assert path_of(page).startswith(f"/effects/{unknown.id}/?decided=")
    expect(page.locator("#effect-status")).to_have_text("confirmed")
    expect(page.locator("#decision-result")).to_contain_text("Decision recorded (confirm)")
    (decision,) = decisions_on(unknown)
    assert decision.provenance["actor"] == "operator:olga"
    assert ReviewItem.objects.get(effect=unknown).resolved_by == olga


def test_the_pages_load_htmx_from_static_and_break_no_content_security_rule(
    signed_in, new_context, live_server, olga, unknown, elsewhere
):
    page = signed_in(olga)
    requested: list[str] = []
    errors: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    for name, path in (
        ("overview", "/"),
        ("queue", "/queue/"),
        ("effect", f"/effects/{unknown.id}/"),
    ):
        response = page.goto(path)
        assert response is not None and response.status == 200
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert page.evaluate("typeof htmx") == "object", path
        scripts = page.locator("script").evaluate_all(
            "els => els.map(e => [e.src, e.defer, e.textContent.trim()])"
        )
        # Every script a deferred static file, none inline; htmx first.
        assert scripts[0][0] == f"{live_server.url}/static/vendor/htmx-2.0.11.min.js", scripts
        assert all(
            src.startswith(f"{live_server.url}/static/") and deferred and not body
            for src, deferred, body in scripts
        ), scripts
        shot = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=shot, full_page=True)
        assert shot.read_bytes().startswith(b"\x89PNG")
        assert errors == [], (path, errors)

    # An htmx swap too: the queue's filter, answered in place.
    page.goto("/queue/")
    page.get_by_label("Effect status").select_option("unknown")
    expect(item_row(page, elsewhere)).to_have_count(0)
    assert errors == []
    assert all(url.startswith(live_server.url) for url in requested), requested

    # The listener does hear a violation: an inline style, as htmx's own indicator CSS would be.
    control = new_context().new_page()
    control.goto("/login/")
    with control.expect_console_message(lambda m: "Content Security Policy" in m.text):
        control.evaluate("document.body.setAttribute('style', 'color: red')")


def test_the_overview_refreshes_its_panels_in_place_after_a_change(
    signed_in, olga, make_effect, settings
):
    # The counts come from the summary, re-read in the background every LEDGER_METRICS_REFRESH
    # seconds while the page polls (10 by default): a second here, so that the change shows at
    # the next poll or the one after, within the 7 s waited below.
    settings.LEDGER_METRICS_REFRESH = 1
    make_effect("unknown")
    page = signed_in(olga)
    unknown_count = page.locator("#by-status tr", has=page.locator(".status-unknown")).locator(
        "td.num"
    )
    expect(unknown_count).to_have_text("1")
    page.evaluate("window.notReloaded = true")

    make_effect("unknown")
    expect(unknown_count).to_have_text("2", timeout=7_000)
    assert page.evaluate("window.notReloaded") is True
