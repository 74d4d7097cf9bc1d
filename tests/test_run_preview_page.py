"""The run preview page, "what will recovery do for run X?": the agent API's dry run, as a
table an operator or auditor reads; nothing moves by reading it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ledger.models import Effect, Reason
from ledger.rules.reviewqueue import open_review
from tests.factories import signed_in
from tests.helpers import expire_lease

ROW = re.compile(r'<tr data-effect="([^"]+)" data-action="([^"]+)" data-reason="([^"]*)">')


def page_rows(html: str) -> list[tuple[str, str, str]]:
    return ROW.findall(html)


def api_dry_run(agent, run_id: str) -> dict[str, Any]:
    response = agent.post("/recovery", {"run_id": run_id, "dry_run": True})
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def run(alice) -> dict[str, str]:
    """One run with an effect for each kind of plan, and one settled effect."""
    sent = alice.intent(run_id="run-7", step_id="settled")
    alice.outcome(sent["id"], alice.claim(sent["id"])["lease_token"], "confirmed", provider_ref="c")
    upstream = alice.intent(run_id="run-7", step_id="reserve")
    blocked = alice.intent(run_id="run-7", step_id="ship", depends_on=[upstream["id"]])
    lost = alice.intent(run_id="run-7", step_id="charge")
    alice.claim(lost["id"])
    expire_lease(lost["id"])
    asked = alice.intent(run_id="run-7", step_id="email", tool="send_email")
    alice.outcome(asked["id"], alice.claim(asked["id"])["lease_token"], "unknown")
    open_review(asked["id"], Reason.NO_LOOKUP)
    return {
        "settled": sent["id"],
        "upstream": upstream["id"],
        "blocked": blocked["id"],
        "lost": lost["id"],
        "asked": asked["id"],
    }


def test_the_page_shows_exactly_what_the_apis_dry_run_answers_and_moves_nothing(olga, alice, run):
    before = dict(Effect.objects.values_list("id", "version"))

    response = signed_in(olga).get("/runs/", {"run": "run-7", "agent": "alice"})

    assert response.status_code == 200
    html = response.content.decode()
    api = api_dry_run(alice, "run-7")
    assert page_rows(html) == [
        (item["effect"]["id"], item["action"], item["reason"]) for item in api["effects"]
    ]
    plans = {effect: (action, reason) for effect, action, reason in page_rows(html)}
    assert plans == {
        run["upstream"]: ("retry_safe", "planned"),
        run["blocked"]: ("wait", "blocked"),
        run["lost"]: ("reconcile", "provider_lookup"),
        run["asked"]: ("review", "no_lookup"),
    }
    for status, n in api["counts_by_status"].items():
        assert f'<span class="status status-{status}">{status}</span> {n}' in html
    assert dict(Effect.objects.values_list("id", "version")) == before


def test_the_page_says_who_acts_links_each_effect_and_names_the_upstream_that_blocks(
    olga, alice, run
):
    html = signed_in(olga).get("/runs/", {"run": "run-7", "agent": "alice"}).content.decode()

    summary = re.search(r'<p id="run-summary"[^>]*>(.*?)</p>', html, re.S).group(1)
    assert "1 will be retried" in summary
    assert "1 asked of the provider" in summary
    assert "1 left for review" in summary
    assert "1 waiting" in summary
    for effect_id in (run["upstream"], run["blocked"], run["lost"], run["asked"]):
        assert f'href="/effects/{effect_id}/"' in html
    blocked_row = html.split(f'data-effect="{run["blocked"]}"')[1].split("</tr>")[0]
    assert f'<a href="/effects/{run["upstream"]}/">planned</a>' in blocked_row
    assert "nobody yet: it waits for an upstream effect to be confirmed" in blocked_row
    assert "agent alice" in html.split(f'data-effect="{run["upstream"]}"')[1].split("</tr>")[0]
    assert "10.00 EUR · acct_42" in html
    assert "No lookup possible <code>no_lookup</code>" in html


def test_an_auditor_reads_the_page_and_people_without_a_role_do_not(audrey, nemo, run):
    response = signed_in(audrey).get("/runs/", {"run": "run-7", "agent": "alice"})
    assert response.status_code == 200
    assert len(page_rows(response.content.decode())) == 4
    assert signed_in(nemo).get("/runs/", {"run": "run-7"}).status_code == 403


def test_without_an_agent_the_runs_own_agent_is_used_or_offered(olga, alice, bob, run):
    alone = signed_in(olga).get("/runs/", {"run": "run-7"}).content.decode()
    assert len(page_rows(alone)) == 4

    bob.intent(run_id="run-7", step_id="other")
    shared = signed_in(olga).get("/runs/", {"run": "run-7"}).content.decode()
    assert page_rows(shared) == []
    assert 'href="/runs/?run=run-7&amp;agent=alice"' in shared
    assert 'href="/runs/?run=run-7&amp;agent=bob"' in shared


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"run": "no-such-run", "agent": "alice"}, "Agent alice has no effects in this run."),
        ({"run": "run-7", "agent": "nobody"}, "No agent named nobody"),
        ({"run": "no-such-run"}, "No agent has a run no-such-run"),
    ],
)
def test_an_unknown_run_or_agent_is_a_clear_empty_state(olga, run, params, says):
    response = signed_in(olga).get("/runs/", params)

    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="run-empty"' in html and says in html
    assert page_rows(html) == []


def test_a_run_with_everything_settled_has_nothing_to_do(olga, alice):
    effect = alice.intent(run_id="done", step_id="only")
    alice.outcome(
        effect["id"], alice.claim(effect["id"])["lease_token"], "confirmed", provider_ref="c"
    )

    html = signed_in(olga).get("/runs/", {"run": "done", "agent": "alice"}).content.decode()

    assert "recovery has nothing to do" in html
    assert '<span class="status status-confirmed">confirmed</span> 1' in html


def test_without_a_run_the_page_asks_for_one(olga):
    response = signed_in(olga).get("/runs/")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="run-form"' in html and 'name="run"' in html and 'name="agent"' in html
    assert 'id="plan"' not in html


@pytest.mark.parametrize(
    "params",
    [
        {"run": ""},
        {"agent": "alice"},
        {"run": "r" * 201},
        {"run": "run-7", "agent": "a" * 101},
        {"run": "run\x00-7"},
    ],
)
def test_bad_input_is_a_400_with_the_form_saying_what_is_wrong(olga, params):
    response = signed_in(olga).get("/runs/", params)

    assert response.status_code == 400
    assert 'class="errorlist' in response.content.decode()


def test_the_page_only_answers_get(olga):
    assert signed_in(olga).post("/runs/", {"run": "run-7"}).status_code == 405
