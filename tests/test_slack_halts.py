"""A halt's alert in Slack (issue 33): *Resume*, which opens a modal asking what the halts page
asks (a reason, the confirmation) and resumes the halt as the page does, by whoever may switch
it on the page; another team's operator is refused alone; a halt resumed meanwhile says so."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from ledger.containment.halts import halt, resume
from ledger.models import Effect, Halt, Team, Tool
from ledger.policy.roles import OPERATOR, grant
from ledger.policy.teams import add_member
from reviews.access.counts import forget
from reviews.alerts.sender import send_due
from tests.slack_interactive import link_slack

pytest_plugins = ["tests.slack_app"]
pytestmark = pytest.mark.django_db(transaction=True)
RESUME = {"action_id": "resume_halt"}


@pytest.fixture
def halted(slack, tools) -> Halt:
    """charge_card halted, its alert in the fake Slack."""
    made = halt("tool", "charge_card", reason="double charges", by="ada").halt
    assert send_due() == {"sent": 1, "failed": 0}
    return made


def texts(message: dict) -> str:
    return "\n".join(b["text"]["text"] for b in message["blocks"] if "text" in b)


def test_an_operator_resumes_a_halt_from_slack_as_from_the_halts_page(slack, halted, olga):
    link_slack(olga, "U0OLGA0001")
    posted = slack.message()
    assert [b.get("block_id") for b in posted["blocks"]][1:] == ["resume", "open"]

    slack.press("", "U0OLGA0001", **RESUME)
    [opened] = slack.state()["views"]
    assert [b["block_id"] for b in opened["view"]["blocks"] if b["type"] == "input"] == [
        "reason", "confirm"]  # fmt: skip
    unconfirmed = slack.submit({"reason": "fixed", "confirm": False}, "U0OLGA0001")
    no_reason = slack.submit({"reason": "", "confirm": True}, "U0OLGA0001")

    assert set(unconfirmed["json"]["errors"]) == {"confirm"}
    assert no_reason["json"]["response_action"] == "errors"
    assert Halt.objects.get(pk=halted.pk).resumed_at is None

    done = slack.submit({"reason": "The provider fixed it.", "confirm": True}, "U0OLGA0001")

    assert done["json"] == {"response_action": "clear"}
    resumed = Halt.objects.get(pk=halted.pk)
    assert (resumed.resumed_by, resumed.resumed_at is not None) == ("olga", True)
    decision = Effect.objects.filter(kind="decision", provenance__action="resume").get()
    assert decision.provenance["actor"] == "olga"
    assert decision.provenance["channel"] == "slack" and decision.request["channel"] == "slack"
    assert "olga resumed it from Slack" in texts(slack.message())


def test_another_teams_operator_may_not_resume_a_teams_halt(slack, halted, olga):
    alpha = Team.objects.create(name="Alpha", slug="alpha")
    beta = Team.objects.create(name="Beta", slug="beta")
    Tool.objects.filter(name="charge_card").update(team=alpha)
    oscar = User.objects.create_user("oscar")
    grant(oscar, OPERATOR)
    add_member(oscar, beta)
    forget()
    link_slack(oscar, "U0OSCAR001")

    answer = slack.press("", "U0OSCAR001", **RESUME)

    assert answer["status"] == 200
    [said] = slack.ephemeral()
    assert "oscar may not resume this halt" in said
    assert slack.state()["views"] == []
    assert Halt.objects.get(pk=halted.pk).resumed_at is None


def test_a_halt_resumed_in_the_page_meanwhile_says_so(slack, halted, olga):
    link_slack(olga, "U0OLGA0001")
    resume(halted.pk, reason="fixed upstream", by="otto")

    slack.press("", "U0OLGA0001", **RESUME)

    assert "Already resumed by otto" in texts(slack.message())
    assert slack.state()["views"] == []
    assert Effect.objects.filter(kind="decision", provenance__action="resume").count() == 1
