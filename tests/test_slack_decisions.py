"""Deciding from Slack (issue 33, ADR 0020): an alert about an item that needs a person carries
the decisions the page offers as buttons (the suggested one first), a press reaches the ledger
signed as Slack signs, and the decision is recorded through the page's `decide()` under the
page's rules: the same four-eyes (compared as persons), the same team scope, the same fields
asked for in a modal, the message updated in place with who decided what, and a message
decided elsewhere saying so instead of acting.

The fake Slack is a real process; the ledger is the live server; every request between them is
real HTTP (tests/slack_interactive.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from ledger.models import Agent, Alert, AlertKind, Effect, RetryProposal, ReviewItem, Team
from ledger.policy.roles import OPERATOR, grant
from ledger.policy.teams import add_member
from reviews.access.counts import forget
from reviews.alerts.sender import send_due
from reviews.models import UsedLink
from reviews.sso.people import link
from tests.factories import in_review, lookup, signed_in, tampering
from tests.slack_interactive import alert_on, link_slack

pytest_plugins = ["tests.slack_app"]
pytestmark = pytest.mark.django_db(transaction=True)


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind="decision").order_by("created_at"))


def texts(message: dict) -> str:
    """Every text of a message's blocks, in order."""
    found = []
    for block in message["blocks"]:
        if "text" in block:
            found.append(block["text"]["text"])
        for element in [*block.get("elements", []), block.get("accessory") or {}]:
            if "text" in element:
                found.append(element["text"]["text"])
    return "\n".join(found)


@pytest.fixture
def found_charge(make_effect, tools) -> Effect:
    """An unknown charge a lookup found confirmed as ch_42: the evidence fills a confirm."""
    effect = make_effect("unknown", attempt=1)
    lookup(effect, "found", provider_ref="ch_42", status="confirmed")
    return effect


def test_the_alert_offers_the_suggested_decision_first_then_the_others_with_what_they_do(
    slack, found_charge
):
    alert_on(found_charge)

    message = slack.message()

    choices = [b for b in message["blocks"] if b.get("block_id", "").startswith("choice:")]
    first = choices[0]
    assert first["block_id"] == "choice:confirm"
    assert first["accessory"]["style"] == "primary"
    # The suggestion fills everything: one press behind Slack's confirmation, the page's question.
    assert "ch_42" in first["accessory"]["confirm"]["text"]["text"]
    assert first["text"]["text"].startswith("Confirm (suggested): The effect becomes confirmed")
    assert [c["block_id"] for c in choices[1:]] == ["choice:fail"]
    assert "confirm" not in choices[1]["accessory"]
    assert message["blocks"][-1]["elements"][0]["url"].endswith(f"/effects/{found_charge.id}/")
    assert found_charge.effect_key in message["text"]


def test_a_press_on_the_suggested_decision_records_it_as_the_page_would(
    slack, found_charge, olga, make_effect
):
    link_slack(olga, "U0OLGA0001")
    item = alert_on(found_charge)

    answer = slack.press("confirm", "U0OLGA0001")

    assert answer["status"] == 200, answer
    found_charge.refresh_from_db()
    assert (found_charge.status, found_charge.provider_ref) == ("confirmed", "ch_42")
    [decision] = decisions_on(found_charge)
    recorded = decision.provenance
    assert (recorded["action"], recorded["actor"]) == ("confirm", "operator:olga")
    assert (recorded["channel"], recorded["user_id"]) == ("slack", olga.pk)
    item.refresh_from_db()
    assert (item.resolved_by, item.decision_id) == (olga, decision.id)
    # The same ask from the page records the same decision, but for its channel.
    other = make_effect("unknown", attempt=1)
    lookup(other, "found", provider_ref="ch_42", status="confirmed")
    in_review(other)
    other.refresh_from_db()
    asked = {k: decision.request[k] for k in ("reason", "evidence", "provider_ref")}
    page = signed_in(olga).post(
        f"/effects/{other.id}/decide/confirm", {"version": other.version, "confirm": "on", **asked}
    )
    assert page.status_code == 302
    [from_page] = decisions_on(other)
    assert _comparable(from_page) == _comparable(decision)
    assert from_page.provenance["channel"] == "page"
    # The message says who decided what, in place; its buttons are gone.
    updated = slack.message()
    assert updated["replaced"] == 1
    assert "olga decided from Slack: Confirm" in texts(updated)
    assert not any("accessory" in b for b in updated["blocks"])


def _comparable(decision: Effect) -> tuple[dict, dict]:
    """A decision's record without what differs between two effects and two channels."""
    differs = ("channel", "before", "after", "review_item")
    kept = {k: v for k, v in decision.provenance.items() if k not in differs}
    asked = {k: v for k, v in decision.request.items() if k != "expected_version"}
    return kept, asked


def test_a_decision_the_page_asks_fields_for_opens_a_modal_and_is_recorded_on_submission(
    slack, found_charge, olga
):
    link_slack(olga, "U0OLGA0001")
    alert_on(found_charge)

    pressed = slack.press("fail", "U0OLGA0001")

    assert pressed["status"] == 200
    [opened] = slack.state()["views"]
    fields = [b["block_id"] for b in opened["view"]["blocks"] if b["type"] == "input"]
    assert fields == ["evidence", "reason"]
    assert not decisions_on(found_charge)

    empty = slack.submit({"evidence": "", "reason": ""}, "U0OLGA0001")

    assert empty["json"]["response_action"] == "errors"
    assert set(empty["json"]["errors"]) == {"evidence", "reason"}
    assert not decisions_on(found_charge)

    done = slack.submit(
        {"evidence": "Support ticket 7: the bank declined it.", "reason": "Declined."},
        "U0OLGA0001",
    )

    assert done["json"] == {"response_action": "clear"}
    found_charge.refresh_from_db()
    assert found_charge.status == "failed"
    [decision] = decisions_on(found_charge)
    assert decision.provenance["channel"] == "slack"
    assert decision.request["evidence"] == "Support ticket 7: the bank declined it."
    assert "olga decided from Slack: Mark failed" in texts(slack.message())


@pytest.fixture
def proposed(make_effect, tools, olga) -> Effect:
    """A retry olga proposed in the page on her word alone: it waits for a second person."""
    email = make_effect("unknown", tool="send_email", attempt=1)
    alert_on(email, "no_lookup")
    page = signed_in(olga).post(f"/effects/{email.id}/decide/retry", {
        "version": email.version, "reason": "never arrived", "confirm": "on",
        "verified_absent": "on", "evidence": "mail log: nothing sent"})  # fmt: skip
    assert page.status_code == 302
    assert RetryProposal.objects.get(effect=email).decided_at is None
    return email


def test_four_eyes_across_channels_proposed_in_the_page_approved_from_slack(
    slack, proposed, olga, otto
):
    olga_sso = User.objects.create_user("sso.olga")
    grant(olga_sso, OPERATOR)
    link(olga, olga_sso)  # two accounts of one person
    link_slack(olga, "U0OLGA0001")
    link_slack(olga_sso, "U0OLGA0002")
    link_slack(otto, "U0OTTO0001")
    _send_alert_again(proposed)

    own = slack.press("approve", "U0OLGA0001")
    same_person = slack.press("approve", "U0OLGA0002")

    assert own["status"] == same_person["status"] == 200
    refusals = slack.ephemeral()
    assert len(refusals) == 2
    assert all("You asked for this yourself" in said for said in refusals)
    assert slack.state()["views"] == []
    assert RetryProposal.objects.get(effect=proposed).decided_at is None

    slack.press("approve", "U0OTTO0001")
    done = slack.submit({"reason": "Checked the mail log too."}, "U0OTTO0001")

    assert done["json"] == {"response_action": "clear"}
    proposal = RetryProposal.objects.get(effect=proposed)
    assert (proposal.decided_by, proposal.outcome) == (otto, "confirmed")
    proposed.refresh_from_db()
    assert proposed.status == "planned"
    approved = decisions_on(proposed)[-1]
    assert approved.provenance["channel"] == "slack"
    assert approved.provenance["actor"] == "operator:otto"


def _send_alert_again(effect: Effect) -> None:
    """Another alert on the item, now that the proposal waits, sent as the sender sends it."""
    item = ReviewItem.objects.get(effect=effect, resolved_at=None)
    Alert.objects.create(kind=AlertKind.REVIEW_DUE_SOON, key=f"again:{item.pk}", payload={
        "summary": effect.effect_key, "link": f"/effects/{effect.id}/",
        "review_item": item.pk, "effect_id": str(effect.id)})  # fmt: skip
    assert send_due() == {"sent": 1, "failed": 0}


def test_another_teams_operator_is_refused_alone_and_nothing_is_recorded(slack, found_charge, olga):
    alpha = Team.objects.create(name="Alpha", slug="alpha")
    beta = Team.objects.create(name="Beta", slug="beta")
    Agent.objects.filter(pk=found_charge.agent_id).update(team=alpha)
    add_member(olga, alpha)
    oscar = User.objects.create_user("oscar")
    grant(oscar, OPERATOR)
    add_member(oscar, beta)
    forget()
    link_slack(oscar, "U0OSCAR001")
    alert_on(found_charge)
    before = slack.message()

    answer = slack.press("confirm", "U0OSCAR001")

    assert answer["status"] == 200
    [said] = slack.ephemeral()
    assert "oscar decides only on effects of their teams" in said
    assert not decisions_on(found_charge)
    assert slack.message() == before
    assert not UsedLink.objects.exists()


def test_a_message_decided_elsewhere_says_so_instead_of_acting(slack, found_charge, olga, otto):
    link_slack(olga, "U0OLGA0001")
    alert_on(found_charge)
    found_charge.refresh_from_db()
    page = signed_in(otto).post(f"/effects/{found_charge.id}/decide/confirm", {
        "version": found_charge.version, "confirm": "on", "reason": "seen at the bank",
        "provider_ref": "ch_42", "evidence": "bank statement"})  # fmt: skip
    assert page.status_code == 302

    answer = slack.press("confirm", "U0OLGA0001")

    assert answer["status"] == 200
    [decision] = decisions_on(found_charge)
    assert decision.provenance["actor"] == "operator:otto"
    said = texts(slack.message())
    assert "Already decided by otto" in said and "nothing was done" in said


def test_a_message_whose_effect_moved_since_says_so_instead_of_acting(slack, found_charge, olga):
    link_slack(olga, "U0OLGA0001")
    alert_on(found_charge)
    with tampering() as cursor:  # the effect moved on (its version) while its item stays open
        cursor.execute("UPDATE ledger_effect SET version = version + 1 WHERE id = %s",
                       [found_charge.id])  # fmt: skip

    slack.press("confirm", "U0OLGA0001")

    assert not decisions_on(found_charge)
    assert "This message is out of date" in texts(slack.message())


def test_a_modal_submitted_after_someone_decided_elsewhere_records_nothing(
    slack, found_charge, olga, otto
):
    link_slack(olga, "U0OLGA0001")
    alert_on(found_charge)
    slack.press("fail", "U0OLGA0001")
    found_charge.refresh_from_db()
    signed_in(otto).post(f"/effects/{found_charge.id}/decide/confirm", {
        "version": found_charge.version, "confirm": "on", "reason": "seen at the bank",
        "provider_ref": "ch_42", "evidence": "bank statement"})  # fmt: skip

    late = slack.submit({"evidence": "the bank declined it", "reason": "declined"}, "U0OLGA0001")

    assert late["json"]["response_action"] == "errors"
    assert "Already decided by otto" in late["json"]["errors"]["reason"]
    [decision] = decisions_on(found_charge)
    assert decision.provenance["actor"] == "operator:otto"
    assert "Already decided by otto" in texts(slack.message())
