"""The run preview in Chromium: an operator asks what recovery will do for a run, reads the plan
the API's dry run gives, follows an effect's link; at phone width the page does not scroll
sideways. No console errors, no CSP violations, no 4xx/5xx."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, Response, expect

from tests.browser.conftest import path_of

pytestmark = pytest.mark.browser


def failed_responses(page: Page) -> list[str]:
    failures: list[str] = []

    def seen(response: Response) -> None:
        if response.status >= 400:
            failures.append(f"{response.status} {response.url}")

    page.on("response", seen)
    return failures


def test_an_operator_asks_what_recovery_will_do_for_a_run_and_opens_an_effect(
    signed_in, olga, alice
):
    upstream = alice.intent(run_id="run-9", step_id="reserve")
    blocked = alice.intent(run_id="run-9", step_id="ship", depends_on=[upstream["id"]])
    plan = alice.post("/recovery", {"run_id": "run-9", "dry_run": True}).json()["effects"]
    page = signed_in(olga)
    failures = failed_responses(page)

    page.goto("/runs/")
    page.get_by_label("Run id").fill("run-9")
    page.get_by_label("Agent").fill("alice")
    page.get_by_role("button", name="Show the plan").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("run-9")
    rows = page.locator("#run-plan tbody tr")
    expect(rows).to_have_count(len(plan))
    for row, item in zip(rows.all(), plan, strict=True):
        expect(row).to_have_attribute("data-effect", item["effect"]["id"])
        expect(row).to_have_attribute("data-action", item["action"])
    expect(page.locator("#run-summary")).to_contain_text("1 will be retried")
    blocked_row = page.locator(f"tr[data-effect='{blocked['id']}']")
    expect(blocked_row).to_contain_text("it waits for an upstream effect to be confirmed")

    blocked_row.get_by_role("link", name="ship").click()
    expect(page.locator("#effect-status")).to_have_text("planned")
    assert path_of(page) == f"/effects/{blocked['id']}/"
    assert failures == []


def test_at_phone_width_the_run_page_does_not_scroll_sideways(signed_in, audrey, alice):
    for step in ("one", "two", "three"):
        alice.intent(run_id="run-phone", step_id=step, target="acct_with_a_rather_long_name_42")
    page = signed_in(audrey)
    page.set_viewport_size({"width": 390, "height": 844})
    failures = failed_responses(page)

    page.goto("/runs/?run=run-phone&agent=alice")

    expect(page.locator("#run-plan tbody tr")).to_have_count(3)
    scroll, width = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= width
    assert failures == []


def test_the_retry_form_says_what_happens_next_before_anything_is_decided(signed_in, olga, alice):
    effect = alice.intent(run_id="run-r", step_id="pay")
    alice.outcome(effect["id"], alice.claim(effect["id"])["lease_token"], "unknown")
    page = signed_in(olga)
    failures = failed_responses(page)

    page.goto(f"/effects/{effect['id']}/?decide=retry")

    preview = page.locator("#decide-retry form > .preview")
    expect(preview).to_be_visible()
    expect(preview.locator(".status")).to_have_text("planned")
    expect(preview).to_contain_text("agent alice does, with the same idempotency key")
    expect(preview).to_contain_text("alice's /recovery will answer retry_safe (planned)")
    expect(preview.locator("strong.money")).to_have_text("10.00 EUR")
    expect(page.locator("#effect-status")).to_have_text("unknown")
    assert failures == []
