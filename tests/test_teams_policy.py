"""Teams' memberships and the scope rule (ledger.policy.teams, ADR 0014): claim-sourced
memberships are rewritten, an admin's kept; whose an effect is; who sees all; the team's
channel settings checked as the global ones are; `manage.py teams`."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from ledger.models import Agent, Effect, MembershipSource, Team, TeamMembership, Tool
from ledger.policy import configversion, teams
from ledger.policy.roles import ADMIN, AUDITOR, grant


@pytest.fixture
def payments(db) -> Team:
    return Team.objects.create(name="Payments", slug="payments")


@pytest.fixture
def support(db) -> Team:
    return Team.objects.create(name="Support", slug="support")


def fresh(user: User) -> User:
    """The user as the next request loads it: nothing remembered from this one."""
    return User.objects.get(pk=user.pk)


def test_a_claim_makes_its_memberships_exactly_the_teams_it_names(olga, payments, support):
    teams.set_teams_from_claim(olga, ["Payments", "support"])  # by name or by slug
    assert teams.teams_of(fresh(olga)) == {payments.pk, support.pk}
    teams.set_teams_from_claim(olga, ["Support"])
    assert teams.teams_of(fresh(olga)) == {support.pk}
    teams.set_teams_from_claim(olga, [])
    assert teams.teams_of(fresh(olga)) == frozenset()


def test_a_claim_keeps_what_an_admin_set_by_hand(olga, payments, support):
    teams.add_member(olga, payments)
    teams.set_teams_from_claim(olga, ["Support"])
    teams.set_teams_from_claim(olga, [])
    assert teams.teams_of(fresh(olga)) == {payments.pk}
    sources = set(TeamMembership.objects.filter(user=olga).values_list("source", flat=True))
    assert sources == {MembershipSource.ADMIN}


def test_an_unknown_team_in_a_claim_is_ignored_and_logged_once(olga, payments, caplog):
    with caplog.at_level(logging.WARNING, logger="ledger.policy.teams"):
        teams.set_teams_from_claim(olga, ["Payments", "Ghosts-of-teams-past"])
        teams.set_teams_from_claim(olga, ["Payments", "Ghosts-of-teams-past"])
    assert teams.teams_of(fresh(olga)) == {payments.pk}
    logged = [r for r in caplog.records if "Ghosts-of-teams-past" in r.getMessage()]
    assert len(logged) == 1


def test_admins_see_all_teams_auditors_only_with_the_grant(olga, audrey, payments):
    admin = User.objects.create_user("ada2")
    grant(admin, ADMIN)
    assert teams.sees_all_teams(fresh(admin))
    assert not teams.sees_all_teams(fresh(audrey))
    teams.grant_all_teams(audrey)
    assert teams.sees_all_teams(fresh(audrey))
    assert teams.scope_of(fresh(audrey)) is None
    teams.grant_all_teams(audrey, on=False)
    assert not teams.sees_all_teams(fresh(audrey))
    assert teams.scope_of(fresh(olga)) == frozenset()


def test_while_no_team_exists_nobody_is_scoped(olga, audrey):
    # Outside a request, whether any team exists is remembered per configuration version;
    # a team an earlier test made was rolled back with it.
    configversion.expire()
    assert teams.scope_of(olga) is None
    assert teams.scope_of(audrey) is None


def test_an_effect_is_its_tools_team_else_its_agents(make_effect, bob, payments, support):
    alice = Agent.objects.get(name="alice")
    alice.team = payments
    alice.save()
    Tool.objects.filter(name="send_email").update(team=support)
    by_tool = make_effect(tool="send_email")  # alice's, but support's tool
    by_agent = make_effect(tool="charge_card")  # a tool of no team: alice's team
    nobodys = make_effect(agent=bob.agent, tool="charge_card")  # no team anywhere

    def seen_by(team: Team) -> set:
        return set(Effect.objects.filter(teams.effects_q(frozenset({team.pk}))))

    assert seen_by(payments) == {by_agent, nobodys}
    assert seen_by(support) == {by_tool, nobodys}
    assert teams.team_of_effect("send_email", alice.pk) == support
    assert teams.team_of_effect("charge_card", alice.pk) == payments


def test_operators_manage_only_their_teams_things_admins_everything(olga, payments, support):
    teams.add_member(olga, payments)
    olga = fresh(olga)
    assert teams.may_manage_team(olga, payments.pk)
    assert not teams.may_manage_team(olga, support.pk)
    assert not teams.may_manage_team(olga, None)  # global, or of no team: admins only
    admin = User.objects.create_user("ada2")
    grant(admin, ADMIN)
    assert teams.may_manage_team(fresh(admin), None)


def test_a_teams_channels_are_checked_as_the_global_ones_are(db, settings):
    settings.LEDGER_ALERT_WEBHOOK_SECRET = ""
    team = Team(name="Ops", slug="ops", alert_slack_url="ftp://hooks.example/x")
    with pytest.raises(ValidationError) as refused:
        team.full_clean()
    assert "alert_slack_url" in refused.value.message_dict
    team = Team(name="Ops", slug="ops", alert_webhook_url="https://hooks.example/x")
    with pytest.raises(ValidationError) as refused:
        team.full_clean()  # a JSON webhook is signed: not without the secret
    assert "LEDGER_ALERT_WEBHOOK_SECRET" in str(refused.value)
    settings.LEDGER_ALERT_WEBHOOK_SECRET = "s" * 16
    team.full_clean()


def test_the_teams_command_sets_everything_up(olga, audrey, alice, settings):
    out = StringIO()
    call_command("teams", "create", "Payments", "--email", "pay@example.com", stdout=out)
    call_command("teams", "add", "payments", "olga", stdout=out)
    call_command("teams", "agent", "Payments", "alice", stdout=out)
    call_command("teams", "tool", "Payments", "charge_card", stdout=out)
    call_command("teams", "grant-all", "audrey", stdout=out)
    team = Team.objects.get(slug="payments")
    assert team.alert_email == "pay@example.com"
    assert teams.teams_of(fresh(olga)) == {team.pk}
    assert Agent.objects.get(name="alice").team == team
    assert Tool.objects.get(name="charge_card").team == team
    assert teams.sees_all_teams(fresh(audrey))
    listed = StringIO()
    call_command("teams", "list", stdout=listed)
    assert "olga (admin)" in listed.getvalue() and "charge_card" in listed.getvalue()
    call_command("teams", "tool", "-", "charge_card", stdout=out)
    assert Tool.objects.get(name="charge_card").team is None
    with pytest.raises(CommandError, match="No team"):
        call_command("teams", "add", "nobody", "olga", stdout=out)
    with pytest.raises(CommandError, match="alert_slack_url"):
        call_command("teams", "create", "Bad", "--slack", "gopher://x", stdout=out)


def test_an_auditor_is_scoped_like_an_operator_without_the_grant(audrey, payments):
    grant(audrey, AUDITOR)
    assert teams.scope_of(fresh(audrey)) == frozenset()
