"""Teams in Chromium (ADR 0014): an operator of payments works the queue of payments only, and
another team's effect is a page not found, through the address bar and through htmx alike."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ledger.models import Agent, ReviewItem, Team, Tool
from ledger.policy.teams import add_member
from tests.browser.conftest import nav
from tests.factories import in_review

pytestmark = pytest.mark.browser


@pytest.fixture
def two_teams(olga, alice, bob, tools, make_effect) -> tuple[ReviewItem, ReviewItem]:
    payments = Team.objects.create(name="Payments", slug="payments")
    support = Team.objects.create(name="Support", slug="support")
    Agent.objects.filter(name="alice").update(team=payments)
    Agent.objects.filter(name="bob").update(team=support)
    Tool.objects.filter(name="charge_card").update(team=payments)
    Tool.objects.filter(name="send_email").update(team=support)
    add_member(olga, payments)
    ours = in_review(make_effect("unknown", tool="charge_card"))
    theirs = in_review(make_effect("unknown", agent=bob.agent, tool="send_email"))
    return ours, theirs


def test_an_operator_sees_only_their_teams_work_and_another_teams_effect_is_not_found(
    signed_in, live_server, olga, two_teams
):
    ours, theirs = two_teams
    page = signed_in(olga)

    nav(page, "Review queue")
    expect(page.locator(f"tr#item-{ours.pk}")).to_be_visible()
    expect(page.locator(f"tr#item-{theirs.pk}")).to_have_count(0)

    answer = page.goto(f"/effects/{theirs.effect_id}/")
    assert answer is not None and answer.status == 404
    expect(page.get_by_text(str(theirs.effect.effect_key))).to_have_count(0)

    # What htmx would ask for, with the page's own session and CSRF header: 404 as well.
    page.goto(f"/effects/{ours.effect_id}/")
    expect(page.locator("#effect-status")).to_have_text("unknown")
    token = page.evaluate("() => JSON.parse(document.body.getAttribute('hx-headers'))")
    partial = page.request.post(f"/queue/{theirs.pk}/hold", headers={**token, "HX-Request": "true"})
    assert partial.status == 404
    live = page.request.get(
        f"/effects/{theirs.effect_id}/live?version=1&item=0.0.0", headers={"HX-Request": "true"}
    )
    assert live.status == 404
