"""Run halts and teams (issue 34, L3): a run halt set by a person scoped to teams stops only that
run's agents of their teams and agents of no team; an admin's stops every agent's. The halt
carries its teams on its row, so PostgreSQL's coverage rule (`ledger/sql/halts.sql`) applies
them to every claim, whichever process makes it. Agents speak the real API; people use the
real halts page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, ProgrammingError, connection, transaction

from ledger.containment.halts import halt
from ledger.models import Agent, Effect, Halt, Team
from ledger.models.states import Kind
from ledger.policy.roles import ADMIN, OPERATOR, grant
from ledger.policy.teams import add_member
from ledger.rules.halts import refusal_from_trigger
from reviews.access.counts import forget
from tests.factories import signed_in
from tests.helpers import assert_error

RUN = "order-9"
HALT = {"scope": "run", "value": RUN, "reason": "bad order", "confirm": "on"}


@pytest.fixture
def teams(olga, alice, bob) -> dict[str, Team]:
    """alice is Alpha's agent, bob Beta's; olga operates for Alpha, oscar for Beta."""
    alpha = Team.objects.create(name="Alpha", slug="alpha")
    beta = Team.objects.create(name="Beta", slug="beta")
    Agent.objects.filter(name="alice").update(team=alpha)
    Agent.objects.filter(name="bob").update(team=beta)
    add_member(olga, alpha)
    forget()
    return {"alpha": alpha, "beta": beta}


@pytest.fixture
def oscar(teams) -> User:
    user = User.objects.create_user("oscar")
    grant(user, OPERATOR)
    add_member(user, teams["beta"])
    return user


@pytest.fixture
def ada(db) -> User:
    user = User.objects.create_user("ada")
    grant(user, ADMIN)
    return user


def refused(agent, effect: dict) -> None:
    assert_error(agent.post(f"/effects/{effect['id']}/claim", {"owner": "w"}), 409, "halted")


def test_a_teams_run_halt_stops_its_agents_and_lets_another_teams_agent_claim(
    teams, olga, alice, bob, make_agent
):
    nobodys = make_agent("carol")  # an agent of no team
    alice.intent(run_id=RUN, step_id="first")  # only Alpha has used the run
    assert signed_in(olga).post("/halts/add", HALT).status_code == 302
    made = Halt.objects.get(scope="run", value=RUN)
    assert made.teams == [teams["alpha"].pk]

    refused(alice, alice.intent(run_id=RUN, step_id="pay"))
    refused(nobodys, nobodys.intent(run_id=RUN, step_id="pay"))
    assert bob.claim(bob.intent(run_id=RUN, step_id="pay")["id"])["status"] == "dispatching"
    # An intent inserted with its claim: the insert trigger reads the same rule.
    claimed = bob.intent(run_id=RUN, step_id="again", claim=True, owner="w")
    assert claimed["status"] == "dispatching"
    assert_error(
        alice.post(
            "/effects",
            {
                "run_id": RUN,
                "step_id": "again",
                "tool": "charge_card",
                "target": "acct_42",
                "request": {"amount": "10.00", "currency": "EUR"},
                "claim": True,
                "owner": "w",
            },
        ),
        409,
        "halted",
    )


def test_an_admins_run_halt_stops_every_teams_agents(teams, ada, alice, bob):
    mine, theirs = alice.intent(run_id=RUN), bob.intent(run_id=RUN)
    assert signed_in(ada).post("/halts/add", HALT).status_code == 302
    assert Halt.objects.get(scope="run", value=RUN).teams is None

    refused(alice, mine)
    refused(bob, theirs)


def test_the_database_applies_the_teams_to_a_process_that_knows_nothing_of_halts(teams, alice, bob):
    mine, theirs = alice.intent(run_id=RUN), bob.intent(run_id=RUN)
    halt("run", RUN, reason="bad order", by="olga", teams=[teams["alpha"].pk])
    old_claim = (
        "UPDATE ledger_effect SET status = 'dispatching', attempt = attempt + 1, "
        "lease_token = 'old', lease_expires_at = now() + interval '1 minute' "
        "WHERE id = %s AND status = 'planned'"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(old_claim, [theirs["id"]])
    with (
        pytest.raises(ProgrammingError) as stopped,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(old_claim, [mine["id"]])
    assert refusal_from_trigger(stopped.value).extra["halt"]["value"] == RUN
    statuses = dict(Effect.objects.filter(run_id=RUN).values_list("agent__name", "status"))
    assert statuses == {"alice": "planned", "bob": "dispatching"}


def test_only_a_run_halt_carries_teams(teams):
    with pytest.raises(IntegrityError), transaction.atomic():
        Halt.objects.create(scope="tool", value="charge_card", reason="x", teams=[1])
    # halt() narrows run halts only: a tool halt stays every agent's (the tool is one team's).
    assert halt("tool", "charge_card", reason="x", by="olga", teams=[1]).halt.teams is None


def test_a_teams_halt_and_an_admins_of_one_run_are_two(teams, olga, ada, alice, bob):
    alice.intent(run_id=RUN)
    assert signed_in(olga).post("/halts/add", HALT).status_code == 302
    again = signed_in(olga).post("/halts/add", HALT, follow=True)
    assert "Already halted; nothing changed" in again.content.decode()
    assert signed_in(ada).post("/halts/add", HALT).status_code == 302
    assert sorted(
        Halt.objects.filter(scope="run", resumed_at__isnull=True).values_list("teams", flat=True),
        key=str,
    ) == [None, [teams["alpha"].pk]]
    refused(bob, bob.intent(run_id=RUN))


def test_the_page_and_the_decision_show_the_halts_teams(teams, olga, oscar, alice, bob):
    alice.intent(run_id=RUN)
    olgas = signed_in(olga)
    assert olgas.post("/halts/add", HALT).status_code == 302
    made = Halt.objects.get(scope="run", value=RUN)

    page = olgas.get("/halts/").content.decode()
    assert "agents of Alpha and of no team" in page
    decision = Effect.objects.get(kind=Kind.DECISION, target=f"halt:run:{RUN}")
    assert decision.provenance["teams"] == [teams["alpha"].pk]
    assert decision.provenance["team_names"] == ["Alpha"]
    assert decision.request["team_names"] == ["Alpha"]

    # Beta's operator neither sees nor lifts Alpha's halt; Alpha's operator lifts it even
    # after Beta's agent has used the run (which makes the run no single team's).
    bob.intent(run_id=RUN)
    oscars = signed_in(oscar)
    assert f"halt-{made.pk}" not in oscars.get("/halts/").content.decode()
    resume = {"reason": "fixed", "confirm": "on"}
    assert oscars.post(f"/halts/{made.pk}/resume", resume).status_code == 404
    assert olgas.post(f"/halts/{made.pk}/resume", resume).status_code == 302
    resumed = Effect.objects.get(kind=Kind.DECISION, provenance__action="resume")
    assert resumed.provenance["team_names"] == ["Alpha"]
    assert resumed.provenance["channel"] == "page"
