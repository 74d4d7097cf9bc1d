"""The limits page: each declared limit with what the current window used and what is left,
and the claims refused lately; read-only for every reader."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from ledger.models import Agent, Tool
from tests.factories import signed_in
from tests.helpers import assert_error

URL = "/limits/"


def limit_tool(**fields: Any) -> None:
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", **fields
    )


def charge(client, step: str, amount: str) -> dict:
    return client.intent(step_id=step, request={"amount": amount, "currency": "EUR"})


def rows(response) -> dict[str, tuple[str, str, str]]:
    """{(whose, which): (used, limit, left)} from the page's context, as it renders them."""
    return {(u.owner, u.which): (u.used, u.maximum, u.left) for u in response.context["usages"]}


def test_it_shows_each_limit_with_what_this_window_used_and_what_is_left(alice, olga):
    limit_tool(limit_claims_per_minute=3, limit_amount_per_day={"EUR": "100.00"})
    alice.claim(charge(alice, "a", "30.00")["id"])
    alice.claim(charge(alice, "b", "12.50")["id"])
    charge(alice, "c", "50.00")  # planned, never claimed: it counts against nothing yet

    page = signed_in(olga).get(URL)

    assert page.status_code == 200
    assert rows(page) == {
        ("tool charge_card", "claims per minute"): ("2", "3", "1"),
        ("tool charge_card", "amount per 24 h (EUR)"): ("42.50 EUR", "100.00 EUR", "57.50 EUR"),
    }
    html = page.content.decode()
    assert 'data-scope="tool:charge_card"' in html
    assert '<meter min="0" max="10000" high="10000" value="4250">' in html
    assert 'id="no-refusals"' in html


def test_an_agents_limit_is_listed_by_the_agents_name(alice, audrey):
    Agent.objects.filter(pk=alice.agent.pk).update(limit_claims_per_minute=5)
    alice.claim(alice.intent(step_id="a")["id"])

    page = signed_in(audrey).get(URL)

    assert rows(page) == {(f"agent {alice.agent.name}", "claims per minute"): ("1", "5", "4")}


def test_a_refused_claim_is_listed_with_what_the_agent_was_told(alice, olga):
    limit_tool(limit_claims_per_minute=1)
    alice.claim(charge(alice, "a", "1.00")["id"])
    refused = alice.post(f"/effects/{charge(alice, 'b', '1.00')['id']}/claim", {"owner": "w"})
    told = assert_error(refused, 429, "limit_exceeded")["detail"]

    page = signed_in(olga).get(URL)

    html = page.content.decode()
    assert 'id="refusals"' in html
    assert "<code>tool:charge_card:claims_per_minute</code>" in html
    assert told in html
    assert rows(page)[("tool charge_card", "claims per minute")] == ("1", "1", "0")


def test_with_no_limit_declared_it_says_so(olga, tools):
    page = signed_in(olga).get(URL)
    assert page.status_code == 200
    assert 'id="no-limits"' in page.content.decode()


def test_readers_see_it_in_the_navigation_and_it_has_no_controls(audrey, tools):
    limit_tool(limit_claims_per_minute=3)
    html = signed_in(audrey).get(URL).content.decode()
    assert '<a href="/limits/" aria-current="page">Limits</a>' in html
    main = html.split('<main id="content"', 1)[1].split("</main>", 1)[0]
    assert "<form" not in main and "<button" not in main


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_it_is_read_only(olga, method):
    assert getattr(signed_in(olga), method)(URL).status_code == 405


def test_it_needs_a_role_and_a_sign_in(nemo):
    assert signed_in(nemo).get(URL).status_code == 403
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
