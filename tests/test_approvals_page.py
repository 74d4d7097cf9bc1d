"""The approvals page and banner: what waits for a second operator, who asked, since when, for
how much, with a link to where another operator decides; the asker is told they cannot."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.effects.transitions import transition
from ledger.models import Effect, Reason, RetryProposal, Tool
from ledger.overview.summary import summary
from ledger.policy.roles import OPERATOR, grant
from ledger.rules.reviewqueue import open_review
from reviews.sso.people import link
from tests.factories import signed_in

URL = "/approvals/"


@pytest.fixture
def held(alice, tools) -> Effect:
    """A 1500.00 EUR charge above charge_card's 1000.00 threshold, asked for by alice."""
    tool = tools["charge_card"]
    tool.amount_path, tool.currency_path = "amount", "currency"
    tool.limit_amount_per_day = {"EUR": "100000.00"}
    tool.approve_above = Decimal("1000.00")
    tool.save()
    shown = alice.intent(step_id="big", request={"amount": "1500.00", "currency": "EUR"})
    assert shown["status"] == "awaiting_approval"
    return Effect.objects.get(pk=shown["id"])


@pytest.fixture
def proposed(make_effect, olga) -> Effect:
    """An email retry olga proposed on her word that it was never sent."""
    email = make_effect("unknown", tool="send_email", attempt=1, effect_key="order-9:email")
    open_review(email.id, Reason.NO_LOOKUP)
    body = {
        "version": email.version,
        "reason": "resend",
        "confirm": "on",
        "verified_absent": "on",
        "evidence": "Mail log: never handed to the relay",
    }
    assert signed_in(olga).post(f"/effects/{email.id}/decide/retry", body).status_code == 302
    assert RetryProposal.objects.filter(effect=email, decided_at__isnull=True).exists()
    return email


def test_it_lists_a_held_effect_with_who_asked_the_amount_and_a_link(held, alice, otto):
    page = signed_in(otto).get(URL)

    assert page.status_code == 200
    [row] = page.context["waiting"]
    assert (row.effect, row.what, row.asked_by, row.asker, row.amount) == (
        held,
        "above the approval threshold",
        f"agent {alice.agent.name}",
        "",
        "1500.00 EUR",
    )
    html = page.content.decode()
    assert f'<a href="/effects/{held.id}/">' in html
    assert "You asked" not in html


def test_a_retry_proposal_tells_its_proposer_they_cannot_approve_it(proposed, olga, otto):
    own = signed_in(olga).get(URL)
    [row] = own.context["waiting"]
    assert (row.effect, row.what, row.asked_by, row.grounds) == (
        proposed,
        "retry on an operator's word",
        "operator olga",
        "Mail log: never handed to the relay",
    )
    assert "You asked: another operator must decide." in own.content.decode()

    other = signed_in(otto).get(URL).content.decode()
    assert f'id="approval-{proposed.id}"' in other
    assert "You asked" not in other


def test_the_proposer_is_told_so_through_another_account_of_theirs_too(proposed, olga):
    """Four-eyes compares persons: olga's second account is olga."""
    second = User.objects.create_user("olga-sso")
    grant(second, OPERATOR)
    link(olga, second)
    page = signed_in(second).get(URL).content.decode()
    assert "You asked: another operator must decide." in page
    effect_page = signed_in(second).get(f"/effects/{proposed.id}/").content.decode()
    assert "so another operator must decide" in effect_page


def test_a_proposal_made_before_the_effect_moved_is_not_listed(proposed, otto):
    proposed.refresh_from_db()
    transition(proposed, "failed", actor="test", reason="provider says failed")

    page = signed_in(otto).get(URL)

    assert page.context["waiting"] == []
    assert 'id="no-approvals"' in page.content.decode()


def test_rows_cost_the_same_queries_however_many_wait(alice, tools, otto):
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount",
        currency_path="currency",
        limit_amount_per_day={"EUR": "100000.00"},
        approve_above=Decimal("10.00"),
    )
    client = signed_in(otto)

    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert client.get(URL).status_code == 200
        return len(seen)

    alice.intent(step_id="s0", request={"amount": "20.00", "currency": "EUR"})
    queries()  # the process's first page reads the ledger's summary (the banner's count)
    one = queries()
    for n in range(1, 6):
        alice.intent(step_id=f"s{n}", request={"amount": "20.00", "currency": "EUR"})
    assert queries() == one


def test_every_page_shows_a_banner_counting_what_waits(held, proposed, audrey):
    page = signed_in(audrey).get("/").content.decode()
    assert 'id="approval-banner"' in page
    assert "<strong>2</strong> waiting for a second operator's approval." in page


def test_the_banner_goes_once_approved_and_an_htmx_partial_never_counts(olga, held):
    client = signed_in(olga)
    assert 'id="approval-banner"' in client.get("/").content.decode()
    with CaptureQueriesContext(connection) as seen:
        partial = client.get("/", headers={"HX-Request": "true"})
    assert 'id="approval-banner"' not in partial.content.decode()
    counts = [q for q in seen if "COUNT(" in q["sql"] and "awaiting_approval" in q["sql"]]
    assert counts == []

    body = {"version": held.version, "reason": "checked with the customer", "confirm": "on"}
    assert client.post(f"/effects/{held.id}/decide/approve", body).status_code == 302

    # The held effects are counted from the ledger's summary, which the next refresh re-reads
    # (every LEDGER_METRICS_REFRESH seconds): expiring it stands for that much time passing.
    summary.expire()
    assert 'id="approval-banner"' not in client.get("/").content.decode()


def test_it_needs_a_role_and_a_sign_in(nemo):
    assert signed_in(nemo).get(URL).status_code == 403
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert signed_in(nemo).post(URL).status_code == 405
