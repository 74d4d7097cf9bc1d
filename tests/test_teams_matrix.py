"""The access matrix's team dimension (ADR 0014): the rows of `tests/test_access_matrix.py`
that name one thing a team owns, requested as each role with the thing owned by the person's
own team and by another team."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client

from ledger.models import Team, Tool
from ledger.policy.roles import AUDITOR, grant
from ledger.policy.teams import add_member, grant_all_teams
from reviews.access.counts import forget
from tests import test_access_matrix as matrix
from tests.helpers import PASSWORD
from tests.test_access_matrix import EXPECTED, ROLES, Sample, sample_url

# The matrix's own fixtures: its sample rows, its admin, its settings.
samples = matrix.samples
ada = matrix.ada
rq_jobs = matrix.rq_jobs
_metrics_token = matrix._metrics_token


# --- The team dimension (ADR 0014) ------------------------------------------------------------
#
# Every route of the pages that names one thing a team owns (an effect, a review item, an
# incident), requested as each role who may be scoped, with the thing owned by the person's own
# team and by another team. The rule, for every such route and method:
# - same team: exactly what the role gets in EXPECTED;
# - another team, for a scoped person (operator, auditor without the grant): exactly what the
#   same request gets for a thing that does not exist, which is a 404 wherever the role may use
#   the route at all (a 405, 403 or sign-in redirect comes first; a bad live-check query too);
# - another team, for whoever sees all teams (admin, auditor with the grant): as EXPECTED.
# The routes are taken from EXPECTED, not listed by hand: a new route naming an effect, an
# item or an incident joins the dimension as soon as it has its row.

TEAM_OBJECTS = ("effect_id", "item_id", "incident_id")
TEAM_ROUTES = [
    route
    for route in EXPECTED
    if not route.startswith(("admin/", "api/")) and any(f":{p}>" in route for p in TEAM_OBJECTS)
]
SCOPED_ROLES = ("auditor", "operator")
TEAM_ROLES = ("auditor", "operator", "admin", "all-teams auditor")
MISSING = {"effect_id": "00000000-0000-4000-8000-000000000000", "item_id": "999999"}
MISSING["incident_id"] = "999999"


@pytest.fixture
def gail(db) -> User:
    """An auditor with the "all teams" grant."""
    user = User.objects.create_user("gail", password=PASSWORD)
    grant(user, AUDITOR)
    grant_all_teams(user)
    return user


def _own_by(team_name: str, alice) -> None:
    """Two teams, olga and audrey in "mine"; the samples' agent and tool owned by `team_name`."""
    mine, _ = Team.objects.get_or_create(name="mine", slug="mine")
    theirs, _ = Team.objects.get_or_create(name="theirs", slug="theirs")
    for username in ("olga", "audrey"):
        add_member(User.objects.get(username=username), mine)
    owner = mine if team_name == "mine" else theirs
    alice.agent.team = owner
    alice.agent.save(update_fields=["team"])
    Tool.objects.filter(name="charge_card").update(team=owner)
    forget()


def _team_people(audrey, olga, ada, gail) -> dict[str, tuple[Client, User]]:
    people = {"auditor": audrey, "operator": olga, "admin": ada, "all-teams auditor": gail}
    return {role: (Client(raise_request_exception=False), p) for role, p in people.items()}


def _statuses(route: str, samples: dict[str, Sample], people: dict) -> dict[str, dict[str, int]]:
    url = sample_url(route, samples)
    seen: dict[str, dict[str, int]] = {"GET": {}, "POST": {}}
    for method, got in seen.items():
        for role in TEAM_ROLES:
            client, person = people[role]
            if "_auth_user_id" not in client.session:
                client.force_login(person)
            savepoint = transaction.savepoint()
            response = client.get(url) if method == "GET" else client.post(url, {})
            if response.status_code == 500:
                transaction.savepoint_rollback(savepoint)
            else:
                transaction.savepoint_commit(savepoint)
            got[role] = response.status_code
    return seen


def _expected(route: str, role: str) -> dict[str, int]:
    """What EXPECTED gives this role (the all-teams auditor is an auditor there)."""
    column = ROLES.index("auditor" if role == "all-teams auditor" else role)
    get, post = EXPECTED[route]
    return {"GET": get[column], "POST": post[column]}


def test_the_team_dimension_covers_every_route_naming_a_teams_thing():
    assert len(TEAM_ROUTES) >= 9, TEAM_ROUTES  # hold, claim, assign, notes, release, effect…
    assert "effects/<uuid:effect_id>/decide/<str:action>" in TEAM_ROUTES


@pytest.mark.parametrize("team", ["same team", "other team"])
@pytest.mark.parametrize("route", TEAM_ROUTES)
def test_each_role_gets_what_its_teams_allow(route, team, samples, alice, audrey, olga, ada, gail):
    _own_by("mine" if team == "same team" else "theirs", alice)
    people = _team_people(audrey, olga, ada, gail)
    got = _statuses(route, samples, people)
    missing = _statuses(route, {**samples, **MISSING}, people)
    for role in TEAM_ROLES:
        want = _expected(route, role)
        if team == "other team" and role in SCOPED_ROLES:
            # Another team's thing is answered as a missing one: nothing tells them apart.
            want = {method: missing[method][role] for method in want}
        assert {m: got[m][role] for m in got} == want, f"{route} as {role}, {team}"
    if team == "other team":
        for role in SCOPED_ROLES:
            for method in ("GET", "POST"):
                allowed = _expected(route, role)[method] not in (302, 400, 403, 405)
                if allowed:
                    assert got[method][role] == 404, f"{method} {route} as {role}"
