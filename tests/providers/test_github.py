"""The GitHub adapter against the fake GitHub, through PyGithub: what the fake answers is what
PyGithub parses; the lookup finds the effect's issue by its marker over every page of the
issues list, counts duplicates, proves absence only from a complete listing and doubts every
fault; an agent cannot forge another effect's marker; loadtools refuses what the adapter
cannot back; restore mode's window listing finds what was opened."""

from __future__ import annotations

import time
from datetime import timedelta

import github as pygithub
import pytest
from django.utils import timezone
from github import Auth, Github

from devstack.providers.github import caller
from ledger.effects.recovery import database_now
from ledger.models import Effect, RestoreWindow
from ledger.policy.toolfile import ToolFileError
from reconcilers.providers import adapter_for
from reconcilers.providers.checks import check_tool
from reconcilers.providers.github import marker
from reconcilers.providers.outcomes import ListingBroken
from reconcilers.reconcile import process_one
from tests.factories import lease_ran_out
from tests.providers.github_support import REPO, TOOL, declare, opened, request, seed
from tests.test_statements_support import add_event

# The fixtures: github (the fake), issue_tool (declared against it), make_issue.
pytest_plugins = ["tests.providers.github_fixtures"]

pytestmark = pytest.mark.django_db


def lookup(tool, effect):
    return adapter_for(tool).lookup(effect)


def client(github, per_page: int = 30, root: str = "") -> Github:
    return Github(
        base_url=github.url + root,
        auth=Auth.Token(caller.TOKEN),
        retry=None,
        per_page=per_page,
        lazy=True,
    )


# --- the fake speaks GitHub ----------------------------------------------------------------


def test_pygithub_opens_lists_and_reads_issues_from_the_fake(github):
    repo = client(github).get_repo(REPO)
    made = repo.create_issue(title="Printer on fire", body="Third floor.", labels=["bug"])
    for n in range(4):
        repo.create_issue(title=f"issue {n}")
    seed(github, "A pull request", "Fixes #1", time.time(), pull=True)

    paged = client(github, per_page=2).get_repo(REPO)
    listed = list(paged.get_issues(state="all", sort="created", direction="desc"))
    again = client(github, root="/api/v3").get_repo(REPO).get_issue(made.number)

    assert (made.number, made.title, made.state, made.user.login) == (
        1,
        "Printer on fire",
        "open",
        "effect-ledger-bot",
    )
    assert [label.name for label in made.labels] == ["bug"]
    assert made.node_id.startswith("I_") and made.created_at.tzinfo is not None
    assert [i.number for i in listed] == [6, 5, 4, 3, 2, 1]  # three pages of two
    assert listed[0].pull_request is not None and listed[1].pull_request is None
    assert (again.node_id, again.body) == (made.node_id, "Third floor.")


def test_pygithub_reads_the_fakes_refusals_as_githubs(github):
    repo = client(github).get_repo(REPO)

    with pytest.raises(pygithub.GithubException) as invalid:
        repo.create_issue(title="")
    with pytest.raises(pygithub.BadCredentialsException):
        wrong = Github(base_url=github.url, auth=Auth.Token("ghp_wrong"), retry=None, lazy=True)
        wrong.get_repo(REPO).get_issue(1).update()
    with pytest.raises(pygithub.UnknownObjectException):
        repo.get_issue(99).update()
    github.http.post("/_sandbox/rate-limit", json={"retry_after": 30})
    with pytest.raises(pygithub.RateLimitExceededException) as limited:
        repo.create_issue(title="too fast")

    assert invalid.value.status == 422
    assert invalid.value.data["errors"] == [
        {"resource": "Issue", "code": "missing_field", "field": "title"}
    ]
    assert invalid.value.data["documentation_url"].startswith("https://docs.github.com/")
    assert (limited.value.status, limited.value.headers["retry-after"]) == (403, "30")
    assert github.transactions() == []


# --- found, duplicate, not found ---------------------------------------------------------


def test_the_effects_issue_is_found_by_its_marker(github, issue_tool, make_issue):
    effect = make_issue()
    sent = opened(github, effect)

    answer = lookup(issue_tool, effect)

    assert sent["status"] == "confirmed"
    assert (answer.outcome, answer.status, answer.provider_ref) == (
        "found",
        "confirmed",
        sent["provider_ref"],
    )
    assert answer.mismatches == () and answer.listed
    assert answer.answer["number"] == sent["response"]["number"]


def test_an_issue_on_a_later_page_is_found_and_two_are_a_duplicate(github, issue_tool, make_issue):
    once, twice = make_issue(), make_issue()
    opened(github, once)
    opened(github, twice)
    opened(github, twice)
    now = time.time()
    # Newer than ours: ours are on the third page of a hundred.
    seed(github, "noise", "no marker", now + 1, copies=230)

    found = lookup(issue_tool, once)
    doubled = lookup(issue_tool, twice)

    assert (found.outcome, found.status) == ("found", "confirmed")
    assert (doubled.outcome, len(doubled.refs), doubled.listed) == ("duplicate", 2, True)


def test_absence_is_listed_and_neither_pull_requests_nor_others_issues_count(
    github, issue_tool, make_issue
):
    effect, other = make_issue(), make_issue()
    opened(github, other)
    ours = marker.marked_body("A pull request that mentions us", effect.idempotency_key, effect.id)
    seed(github, "A pull request", ours, time.time(), pull=True)

    answer = lookup(issue_tool, effect)

    assert (answer.outcome, answer.listed) == ("not_found", True)
    assert "none of 1 issues" in answer.detail


def test_a_title_that_differs_from_the_request_is_a_mismatch(github, issue_tool, make_issue):
    effect = make_issue()
    opened(github, effect, title="Someone else's title")

    answer = lookup(issue_tool, effect)

    assert (answer.outcome, answer.mismatches) == ("found", ("title differs from the request's",))


def test_a_marker_in_the_agents_body_cannot_pass_for_another_effects(
    github, issue_tool, make_issue
):
    victim, forger = make_issue(), make_issue()
    forged = f"Done.\n{marker.marker(victim.idempotency_key, victim.id)}"
    loose = f"<!--effect-ledger key={victim.idempotency_key} effect={victim.id}-->"

    sent = opened(github, forger, body=f"{forged}\n{loose.upper()}")

    [stored] = github.transactions()
    assert sent["status"] == "confirmed"
    assert [m.key for m in marker.markers(stored["body"])] == [forger.idempotency_key]
    assert "&lt;!-- effect-ledger key=" in stored["body"]
    assert lookup(issue_tool, victim).outcome == "not_found"
    assert lookup(issue_tool, forger).outcome == "found"


def test_a_person_who_removes_the_marker_makes_the_issue_unfindable(github, issue_tool, make_issue):
    """What the listing cannot prove: an issue whose body a person edited."""
    effect = make_issue()
    sent = opened(github, effect)
    github.http.patch(
        f"/repos/{REPO}/issues/{sent['response']['number']}",
        json={"body": "edited"},
        headers={"Authorization": f"token {caller.TOKEN}"},
    )

    assert lookup(issue_tool, effect).outcome == "not_found"


def test_issues_opened_before_the_window_are_not_read(github, issue_tool, make_issue):
    effect = make_issue()
    old = time.time() - 3600
    body = marker.marked_body("old", effect.idempotency_key, effect.id)
    seed(github, "Opened an hour before the effect", body, old)

    answer = lookup(issue_tool, effect)

    assert (answer.outcome, answer.listed) == ("not_found", True)


def test_an_effect_that_started_in_doubt_is_looked_for_back_to_the_lost_branch(
    github, issue_tool, make_issue
):
    """After a restore, an effect recorded again may have been sent on the branch the database
    lost, before it was recorded here: the listing reaches back to that branch's reach."""
    now = database_now()
    window = RestoreWindow.objects.create(
        lost_since=now - timedelta(hours=2),
        started_at=now - timedelta(hours=1),
        source="manual",
        started_by="shell:t",
        reason="PITR",
        fork_seq=0,
    )
    doubted, plain = make_issue(), make_issue()
    at = window.started_at + timedelta(minutes=10)
    add_event(doubted, at, kind="intent", to="unknown", reason="intent")
    sent_on_the_lost_branch = time.time() - 90 * 60
    for effect in (doubted, plain):
        body = marker.marked_body("", effect.idempotency_key, effect.id)
        seed(github, "Opened before the effect was recorded here", body, sent_on_the_lost_branch)

    assert lookup(issue_tool, doubted).outcome == "found"
    assert lookup(issue_tool, plain).outcome == "not_found"


# --- every fault is inconclusive ----------------------------------------------------------


FAULTS = {
    "5xx": ({"fail5xx": 502}, "GitHub answered 502"),
    "html": ({"garbage": True}, "not a list of issues"),
    "wrong-types": ({"wrong_types": True}, "cannot read"),
    "timeout": ({"hang": 3}, "no answer from GitHub: ReadTimeout"),
    "dropped": ({"drop": True}, "no answer from GitHub"),
}


@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
def test_a_fault_on_the_listing_is_inconclusive(github, issue_tool, make_issue, fault):
    effect = make_issue()
    opened(github, effect)
    issue_tool.reconciler_config = {**issue_tool.reconciler_config, "timeout": 1}
    faults, said = FAULTS[fault]
    github.set_faults(methods=("GET",), **faults)

    answer = lookup(issue_tool, effect)

    assert (answer.outcome, answer.retry_after) == ("inconclusive", None)
    assert said in answer.detail


def test_a_page_cut_short_after_a_whole_one_proves_nothing(github, issue_tool, make_issue):
    effect = make_issue()
    now = time.time()
    seed(github, "noise", None, now, copies=120)
    github.http.post("/_sandbox/truncate", json={"count": 1, "skip": 1})

    answer = lookup(issue_tool, effect)

    assert answer.outcome == "inconclusive" and "JSONDecodeError" in answer.detail


@pytest.mark.parametrize(
    ("limit", "wait"),
    [
        ({"kind": "secondary", "status": 403, "retry_after": 120}, 120.0),
        ({"kind": "secondary", "status": 429, "retry_after": 45}, 45.0),
        ({"kind": "primary", "retry_after": 600}, 600.0),
    ],
    ids=["secondary-403", "secondary-429", "primary-reset"],
)
def test_a_rate_limit_is_ask_later_with_githubs_wait(github, issue_tool, make_issue, limit, wait):
    effect = make_issue()
    github.http.post("/_sandbox/rate-limit", json={**limit, "methods": ["GET"]})

    limited = lookup(issue_tool, effect)
    then = lookup(issue_tool, effect)

    assert limited.outcome == "inconclusive"
    assert wait - 2 <= limited.retry_after <= wait
    assert then.outcome == "not_found"


def test_a_wrong_token_an_unset_one_and_no_github_are_inconclusive(
    github, issue_tool, make_issue, monkeypatch
):
    effect = make_issue()
    monkeypatch.setenv(caller.TOKEN_ENV, "ghp_wrong")
    wrong = lookup(issue_tool, effect)
    monkeypatch.delenv(caller.TOKEN_ENV)
    unset = lookup(issue_tool, effect)
    monkeypatch.setenv(caller.TOKEN_ENV, caller.TOKEN)
    issue_tool.reconciler_config = {
        **issue_tool.reconciler_config,
        "base_url": "http://127.0.0.1:9",
    }
    nobody = lookup(issue_tool, effect)

    assert (wrong.outcome, wrong.detail) == ("inconclusive", "GitHub answered 401: Bad credentials")
    assert (unset.outcome, unset.detail) == ("inconclusive", "no GitHub token in $GITHUB_TOKEN")
    assert nobody.outcome == "inconclusive" and "ConnectionError" in nobody.detail


# --- through the reconciler ---------------------------------------------------------------


def test_a_lost_answer_is_settled_by_the_lookup(github, issue_tool, alice):
    effect = alice.intent(tool=TOOL, target=REPO, request=request(), claim=True)
    sent = caller.send(github.url, effect, request(), "drop")
    lease_ran_out(effect["id"], 1)

    assert process_one(effect["id"])

    stored = Effect.objects.get(pk=effect["id"])
    [issue] = github.transactions()
    assert sent["status"] == "unknown"
    assert (stored.status, stored.provider_ref) == ("confirmed", issue["node_id"])


def test_a_rate_limited_check_waits_past_githubs_retry_after(github, issue_tool, alice):
    effect = alice.intent(tool=TOOL, target=REPO, request=request(), claim=True)
    lease_ran_out(effect["id"], 1)
    github.http.post("/_sandbox/rate-limit", json={"count": 5, "retry_after": 600})

    assert process_one(effect["id"])

    stored = Effect.objects.get(pk=effect["id"])
    assert stored.status == "unknown"
    assert stored.next_check_at >= database_now() + timedelta(seconds=590)


# --- restore mode's window ----------------------------------------------------------------


def test_a_window_lists_every_issue_opened_in_it_with_its_key(github, issue_tool, make_issue):
    first, second = make_issue(), make_issue()
    start = timezone.now() - timedelta(seconds=2)
    seed(github, "Before the window", None, start.timestamp() - 600)
    sent = [opened(github, first), opened(github, second)]
    seed(github, "By a person", "no marker", time.time())
    seed(github, "A pull request", None, time.time(), pull=True)
    seed(github, "noise", None, time.time(), copies=110)

    listing = adapter_for(issue_tool).list_window(start, timezone.now() + timedelta(seconds=2))
    records = list(listing.records)  # streamed: the pages are fetched as it is read

    assert listing.complete, listing.detail
    assert len(records) == 113
    keyed = {r.reference: r.provider_ref for r in records if r.reference}
    assert keyed == {
        first.idempotency_key: sent[0]["provider_ref"],
        second.idempotency_key: sent[1]["provider_ref"],
    }


def test_a_window_with_a_page_missing_is_incomplete(github, issue_tool):
    start = timezone.now() - timedelta(seconds=2)
    github.http.post("/_sandbox/rate-limit", json={"methods": ["GET"]})

    listing = adapter_for(issue_tool).list_window(start, timezone.now())

    assert listing.complete  # complete unless reading it breaks off, as it does
    with pytest.raises(ListingBroken, match="GitHub answered 403"):
        list(listing.records)


def test_a_windows_pages_are_fetched_as_the_issues_before_them_are_read(github, issue_tool):
    """The listing holds one page at a time: the first page's issues are read before GitHub
    refuses, and the refusal shows only when the next page is wanted."""
    start = timezone.now() - timedelta(seconds=2)
    seed(github, "noise", None, time.time(), copies=110)  # two pages of 100

    listing = adapter_for(issue_tool).list_window(start, timezone.now() + timedelta(seconds=2))
    records = iter(listing.records)
    first_page = [next(records) for _ in range(100)]
    github.http.post("/_sandbox/rate-limit", json={"count": 1, "status": 429, "retry_after": 60})

    assert listing.complete and len({r.provider_ref for r in first_page}) == 100
    with pytest.raises(ListingBroken, match="GitHub answered 429"):
        next(records)


def test_a_window_longer_than_its_page_bound_is_not_complete(github, issue_tool):
    start = timezone.now() - timedelta(seconds=2)
    seed(github, "noise", None, time.time(), copies=110)
    issue_tool.reconciler_config = {**issue_tool.reconciler_config, "window_max_pages": 1}
    issue_tool.save()

    listing = adapter_for(issue_tool).list_window(start, timezone.now() + timedelta(seconds=2))
    records = iter(listing.records)
    first_page = [next(records) for _ in range(100)]

    assert listing.complete and len(first_page) == 100
    with pytest.raises(ListingBroken, match="more than 1 pages of issues"):
        next(records)


# --- loadtools ----------------------------------------------------------------------------

STATEMENTS = {
    "statements": True,
    "amount_path": "amount",
    "currency_path": "currency",
    "amount_unit": "major",
}


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"honours_key": True}, "honours_key: the github adapter speaks to a provider that keeps"),
        (
            {**STATEMENTS, "statement_format": "github_report"},
            "statement_format: the github adapter reads none",
        ),
        (
            {**STATEMENTS, "fetch_statements": True},
            "fetch_statements: the github adapter",
        ),
    ],
    ids=["honours-key", "report", "statements"],
)
def test_loadtools_refuses_a_tool_declaring_more_than_github_backs(
    github, tmp_path, tools, changes, refusal
):
    declare(tmp_path, github.url)

    with pytest.raises(ToolFileError, match=refusal):
        declare(tmp_path, github.url, **changes)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"token": "ghp_inline"}, "reconciler_config.token: a secret is never written here"),
        ({"token_env": None}, "token_env must name the variable"),
        ({"owner": "acme corp"}, "owner must be"),
        ({"repo": ".."}, "repo must be"),
        ({"base_url": "ftp://github.example"}, "base_url must be"),
        ({"clock_skew": 7200}, "clock_skew must be"),
        ({"window_max_pages": 0}, "window_max_pages must be a whole number from 1 to 100000"),
    ],
)
def test_loadtools_refuses_a_configuration_github_cannot_use(config, problem):
    base = {"owner": "acme", "repo": "support", "token_env": "GITHUB_TOKEN"}
    merged = {k: v for k, v in {**base, **config}.items() if v is not None}
    fields = {"reconciler": "github", "reconciler_config": merged, "has_lookup": True}

    assert problem in check_tool("t", fields)


def test_the_enterprise_servers_api_root_works_too(github, tmp_path, tools, make_issue):
    tool = declare(tmp_path, github.url)
    tool.reconciler_config = {**tool.reconciler_config, "base_url": f"{github.url}/api/v3"}
    effect = make_issue()
    opened(github, effect)

    assert lookup(tool, effect).outcome == "found"
