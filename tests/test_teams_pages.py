"""What each person sees and may do, by team (ADR 0014), page by page: the queue and its
search, counts and banners, bulk actions, exports, runs, incidents, statements, halts and
limits. Payments owns alice and charge_card; support owns bob and send_email; olga (operator)
and audrey (auditor) are in payments; gail is an auditor with the "all teams" grant."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from ledger.models import (
    Agent,
    Halt,
    Incident,
    IncidentKind,
    StatementImport,
    StatementLine,
    Team,
    Tool,
)
from ledger.overview.summary import summary
from ledger.policy.roles import ADMIN, AUDITOR, grant
from ledger.policy.teams import add_member, grant_all_teams
from reviews.access.counts import forget
from tests.factories import in_review, signed_in


@pytest.fixture
def gail(db) -> User:
    user = User.objects.create_user("gail")
    grant(user, AUDITOR)
    grant_all_teams(user)
    return user


@pytest.fixture
def ada(db) -> User:
    user = User.objects.create_user("ada")
    grant(user, ADMIN)
    return user


@pytest.fixture
def teams(olga, audrey, alice, bob, tools) -> dict[str, Team]:
    payments = Team.objects.create(name="Payments", slug="payments")
    support = Team.objects.create(name="Support", slug="support")
    Agent.objects.filter(name="alice").update(team=payments)
    Agent.objects.filter(name="bob").update(team=support)
    Tool.objects.filter(name="charge_card").update(team=payments)
    Tool.objects.filter(name="send_email").update(team=support)
    add_member(olga, payments)
    add_member(audrey, payments)
    forget()
    summary.expire()
    return {"payments": payments, "support": support}


@pytest.fixture
def ours_and_theirs(teams, make_effect, bob):
    """An unknown effect of each team, each with an open review item."""
    ours = make_effect("unknown", tool="charge_card")
    theirs = make_effect("unknown", agent=bob.agent, tool="send_email", run_id="bobs-run")
    return in_review(ours), in_review(theirs)


def keys_in_queue(client: Client, query: str = "") -> set[str]:
    page = client.get(f"/queue/{query}").context["page"]
    return {item.effect.effect_key for item in page}


def test_the_queue_lists_only_the_persons_teams_items(ours_and_theirs, olga, audrey, gail, ada):
    ours, theirs = ours_and_theirs
    mine = {ours.effect.effect_key}
    both = mine | {theirs.effect.effect_key}
    assert keys_in_queue(signed_in(olga)) == mine
    assert keys_in_queue(signed_in(audrey)) == mine
    assert keys_in_queue(signed_in(gail)) == both
    assert keys_in_queue(signed_in(ada)) == both


def test_searching_for_another_teams_effect_finds_nothing(
    ours_and_theirs, make_effect, bob, olga, ada
):
    _, theirs = ours_and_theirs
    # One with a review item (the queue lists it) and one without (the page links it).
    unreviewed = make_effect("confirmed", agent=bob.agent, tool="send_email")

    def found(client: Client, text: object) -> set[str]:
        context = client.get(f"/queue/?q={text}").context
        listed = {item.effect.effect_key for item in context["page"]}
        return listed | {effect.effect_key for effect in context["unlisted"]}

    for effect in (theirs.effect, unreviewed):
        assert found(signed_in(olga), effect.id) == set()
        assert found(signed_in(ada), effect.id) == {effect.effect_key}


def test_the_overview_counts_only_the_persons_teams(ours_and_theirs, olga, ada):
    def unknown(client: Client) -> int:
        return dict(client.get("/").context["by_status"])["unknown"]

    def open_reviews(client: Client) -> int:
        return client.get("/").context["open_reviews"]

    assert unknown(signed_in(olga)) == 1
    assert open_reviews(signed_in(olga)) == 1
    assert unknown(signed_in(ada)) == 2
    assert open_reviews(signed_in(ada)) == 2


def test_the_approval_banner_counts_only_the_persons_teams(teams, make_effect, bob, olga, ada):
    make_effect("awaiting_approval", tool="charge_card")
    make_effect("awaiting_approval", agent=bob.agent, tool="send_email")
    make_effect("awaiting_approval", agent=bob.agent, tool="send_email")
    assert signed_in(olga).get("/").context["awaiting_approval"] == 1
    assert signed_in(ada).get("/").context["awaiting_approval"] == 3
    shown = signed_in(olga).get("/approvals/").context["waiting"]
    assert len(shown) == 1


def test_the_incident_banner_and_page_count_only_the_persons_teams(teams, olga, ada):
    ours, theirs = _incident("charge_card"), _incident("send_email")
    assert signed_in(olga).get("/queue/").context["open_incidents"] == 1
    assert signed_in(ada).get("/queue/").context["open_incidents"] == 2
    page = signed_in(olga).get("/incidents/").content.decode()
    assert ours.line.provider_ref in page and theirs.line.provider_ref not in page
    acknowledged = signed_in(olga).post(f"/incidents/{theirs.pk}/acknowledge", {"note": "seen"})
    assert acknowledged.status_code == 404


def test_a_bulk_action_naming_another_teams_item_is_a_404(ours_and_theirs, olga):
    ours, theirs = ours_and_theirs
    client = signed_in(olga)
    body = {"action": "assign", "assignee": str(olga.pk)}
    assert client.post("/queue/bulk", {**body, "items": [ours.pk]}).status_code == 200
    named = client.post("/queue/bulk", {**body, "items": [ours.pk, theirs.pk]})
    assert named.status_code == 404
    # "Everything the filter matches" takes only the person's teams' items.
    everything = client.post("/queue/bulk", {**body, "scope": "all", "query": ""})
    assert everything.status_code == 200
    assert everything.context["count"] == 1


def test_exports_hold_only_the_persons_teams_rows(ours_and_theirs, olga, gail):
    ours, theirs = ours_and_theirs

    def exported(client: Client) -> str:
        response = client.get("/audit/exports/effects.csv")
        assert response.status_code == 200
        return b"".join(response.streaming_content).decode()

    olgas = exported(signed_in(olga))
    assert str(ours.effect_id) in olgas and str(theirs.effect_id) not in olgas
    gails = exported(signed_in(gail))
    assert str(ours.effect_id) in gails and str(theirs.effect_id) in gails


def test_another_teams_run_is_a_run_nobody_has(ours_and_theirs, olga, ada):
    nobody = signed_in(olga).get("/runs/?run=bobs-run&agent=no-such-agent")
    theirs = signed_in(olga).get("/runs/?run=bobs-run&agent=bob")
    assert theirs.status_code == nobody.status_code == 200
    assert "rows" not in theirs.context and "rows" not in nobody.context
    adas = signed_in(ada).get("/runs/?run=bobs-run&agent=bob").context
    assert [row.effect.pk for row in adas["rows"]] == [theirs_effect(ours_and_theirs)]


def test_halts_of_a_teams_tools_are_its_operators_global_ones_admins(teams, olga, ada):
    def halt(client: Client, scope: str, value: str) -> int:
        body = {"scope": scope, "value": value, "reason": "checking", "confirm": "on"}
        return client.post("/halts/add", body).status_code

    olgas = signed_in(olga)
    assert halt(olgas, "tool", "charge_card") == 302
    assert halt(olgas, "tool", "send_email") == 404  # another team's: as no such tool
    assert halt(olgas, "tool", "get_balance") == 403  # a tool of no team: admins only
    assert halt(olgas, "all", "") == 403
    theirs = Halt.objects.get(scope="tool", value="charge_card")
    assert halt(signed_in(ada), "tool", "send_email") == 302
    support = Halt.objects.get(scope="tool", value="send_email")
    page = olgas.get("/halts/")
    assert theirs in page.context["halts"] and support not in page.context["halts"]
    resume = {"reason": "done", "confirm": "on"}
    assert olgas.post(f"/halts/{support.pk}/resume", resume).status_code == 404
    assert olgas.post(f"/halts/{theirs.pk}/resume", resume).status_code == 302


def test_without_teams_an_operator_halts_everything_as_before(olga, tools):
    body = {"scope": "all", "value": "", "reason": "checking", "confirm": "on"}
    assert signed_in(olga).post("/halts/add", body).status_code == 302


def test_statements_of_another_teams_tool_are_not_shown_nor_accepted(teams, olga):
    Tool.objects.filter(name__in=["charge_card", "send_email"]).update(statements=True)
    _incident("charge_card")
    _incident("send_email")
    page = signed_in(olga).get("/statements/")
    listed = {made.tool for made in page.context["page"]}
    assert listed == {"charge_card"}
    choices = [name for name, _ in page.context["form"].fields["tool"].choices]
    assert "send_email" not in choices and "charge_card" in choices


def test_limits_of_another_teams_tools_are_not_shown(teams, olga, ada):
    Tool.objects.filter(name__in=["charge_card", "send_email"]).update(limit_claims_per_minute=5)
    olgas = {u.owner for u in signed_in(olga).get("/limits/").context["usages"]}
    assert olgas == {"tool charge_card"}
    adas = {u.owner for u in signed_in(ada).get("/limits/").context["usages"]}
    assert adas == {"tool charge_card", "tool send_email"}


def test_effects_of_no_team_are_everyones(teams, make_effect, olga):
    Agent.objects.filter(name="alice").update(team=None)
    nobodys = make_effect("unknown", tool="get_balance")
    assert signed_in(olga).get(f"/effects/{nobodys.id}/").status_code == 200


def test_without_teams_every_operator_sees_every_effect(make_effect, bob, olga):
    ours = in_review(make_effect("unknown"))
    theirs = in_review(make_effect("unknown", agent=bob.agent, tool="send_email"))
    assert keys_in_queue(signed_in(olga)) == {ours.effect.effect_key, theirs.effect.effect_key}


def theirs_effect(items) -> object:
    return items[1].effect_id


def _incident(tool: str) -> Incident:
    now = timezone.now()
    made = StatementImport.objects.create(
        tool=tool,
        filename=f"{tool}.csv",
        sha256=tool.ljust(64, "0")[:64],
        period_start=now - timedelta(days=2),
        period_end=now - timedelta(days=1),
        origin="command",
        imported_by="shell:teams",
    )
    line = StatementLine.objects.create(
        statement=made,
        line_no=2,
        provider_ref=f"ch_orphan_{tool}",
        type="charge",
        status="succeeded",
        amount_minor=2500,
        currency="EUR",
        occurred_at=now - timedelta(days=2),
    )
    return Incident.objects.create(
        kind=IncidentKind.ORPHAN, tool=tool, line=line, due_at=now + timedelta(days=1)
    )


def test_items_are_assigned_only_to_the_persons_teams_operators(ours_and_theirs, otto, olga):
    ours, _ = ours_and_theirs
    add_member(otto, Team.objects.get(slug="support"))
    client = signed_in(olga)
    listed = {name for _, name in client.get("/queue/").context["operators"]}
    assert listed == {"olga"}
    refused = client.post(f"/queue/{ours.pk}/assign", {"assignee": str(otto.pk)})
    assert refused.status_code == 400
    assert client.post(f"/queue/{ours.pk}/assign", {"assignee": str(olga.pk)}).status_code == 302
