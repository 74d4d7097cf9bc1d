"""Every refusal of the Slack door, with nothing recorded (issue 33, ADR 0020): unsigned, badly
signed, stale and replayed requests (401 JSON), bodies Slack would not send (400), a door that
is not configured (404); a Slack user mapped to nobody, or to an account without the role, told
so alone; and who a Slack user is: an explicit link made by the person through the link Slack
showed them, or, in a workspace trusted for it only, an SSO account's verified email.

Presses are signed by the fake Slack as Slack signs them; requests Slack would never send are
signed here the same way (tests/slack_interactive.py)."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.core import signing
from django.test import Client

from ledger.models import Effect, WebhookDelivery
from ledger.policy.roles import OPERATOR, grant
from reviews.models import Identity, SlackIdentity, UsedLink
from reviews.remote.slack import people
from reviews.remote.slack.door import DELIVERIES
from reviews.sso import people as sso_people
from reviews.sso.config import read
from tests.factories import lookup, signed_in
from tests.slack_interactive import DOOR, TEAM, alert_on, link_slack

pytest_plugins = ["tests.slack_app"]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alerted(make_effect, tools) -> Effect:
    """An unknown charge a lookup found confirmed, its alert in the fake Slack."""
    effect = make_effect("unknown", attempt=1)
    lookup(effect, "found", provider_ref="ch_42", status="confirmed")
    alert_on(effect)
    return effect


def nothing_recorded(effect: Effect, slack, *, deliveries: int = 0) -> None:
    """No decision, no link used or made, the message as it was posted, no modal; and at most
    `deliveries` signatures kept (a verified request's, which a replay meets)."""
    assert not Effect.objects.filter(parent=effect, kind="decision").exists()
    assert Effect.objects.get(pk=effect.pk).status == "unknown"
    assert not UsedLink.objects.exists()
    state = slack.state()
    assert state["messages"][-1]["replaced"] == 0 and state["views"] == []
    assert WebhookDelivery.objects.filter(provider=DELIVERIES).count() == deliveries


@pytest.mark.parametrize("forgery", ["unsigned", "wrong-secret", "stale", "future"])
def test_a_forged_or_stale_press_is_refused_with_nothing_recorded(slack, alerted, olga, forgery):
    link_slack(olga, "U0OLGA0001")
    if forgery == "unsigned":
        answer = Client().post(DOOR, urlencode({"payload": "{}"}),
                               content_type="application/x-www-form-urlencoded")  # fmt: skip
        status, body = answer.status_code, answer.json()
    else:
        signing_as = {
            "wrong-secret": {"secret": "another-apps-signing-secret-0000"},
            "stale": {"timestamp": int(time.time()) - 301},
            "future": {"timestamp": int(time.time()) + 301},
        }[forgery]
        answer = slack.press("confirm", "U0OLGA0001", **signing_as)
        status, body = answer["status"], answer["json"]

    assert status == 401
    assert body["error"] == "bad_signature" and body["detail"]
    nothing_recorded(alerted, slack)
    assert slack.state()["responses"] == []


def test_a_replayed_press_is_refused_and_acts_once(slack, make_effect, tools, olga):
    link_slack(olga, "U0OLGA0001")
    effect = make_effect("unknown", attempt=1)
    lookup(effect, "found", provider_ref="ch_42", status="confirmed")
    alert_on(effect)
    slack.press("fail", "U0OLGA0001")  # opens a modal: nothing decided yet

    replayed = slack.replay()

    assert replayed["status"] == 401
    assert "already used" in json.loads(replayed["body"])["detail"]
    assert len(slack.state()["views"]) == 1
    assert WebhookDelivery.objects.filter(provider=DELIVERIES).count() == 1


@pytest.mark.parametrize(
    "body",
    [b"not a form at all", b"text=hello", b"payload=%7Bnot%20json", b"payload=%5B1%5D",
     urlencode({"payload": json.dumps({"type": "block_actions", "actions": [
         {"action_id": "decide:confirm", "value": "{\"e\": \"nope\"}"}]})}).encode()],
)  # fmt: skip
def test_a_signed_body_slack_would_not_send_is_a_400_with_nothing_recorded(slack, alerted, body):
    answer = slack.signed_post(body)

    assert answer.status_code == 400
    assert answer.json()["error"] == "bad_request"
    assert not Effect.objects.filter(parent=alerted, kind="decision").exists()
    assert slack.state()["responses"] == []


def test_without_a_signing_secret_the_door_is_not_there(slack, alerted, settings):
    settings.LEDGER_SLACK_SIGNING_SECRET = ""

    answer = slack.signed_post(urlencode({"payload": "{}"}).encode())

    assert answer.status_code == 404 and answer.json()["error"] == "not_found"


def test_the_link_button_is_acknowledged_and_does_nothing(slack, alerted, olga):
    link_slack(olga, "U0OLGA0001")

    answer = slack.press("confirm", "U0OLGA0001", action_id="open_in_ledger")

    assert answer["status"] == 200
    nothing_recorded(alerted, slack, deliveries=1)


def test_a_person_without_the_role_is_told_alone_and_nothing_is_recorded(slack, alerted, audrey):
    link_slack(audrey, "U0AUDREY01")

    answer = slack.press("confirm", "U0AUDREY01")

    assert answer["status"] == 200
    [said] = slack.ephemeral()
    assert "audrey may not decide" in said
    nothing_recorded(alerted, slack, deliveries=1)


def test_an_unlinked_slack_user_links_their_account_through_the_link_shown_to_them(
    slack, alerted, olga
):
    answer = slack.press("confirm", "U0NEWCOMER")

    assert answer["status"] == 200
    [said] = slack.ephemeral()
    assert "not linked to an account of Effect Ledger" in said
    nothing_recorded(alerted, slack, deliveries=1)
    url = said.rsplit(" ", 1)[-1]
    path = url.removeprefix(slack.ledger_url)
    # The link needs the person's sign-in, and a confirmation.
    assert Client().get(path).status_code == 302
    page = signed_in(olga)
    assert "Link Slack user U0NEWCOMER" in page.get(path).content.decode()
    assert not SlackIdentity.objects.exists()

    linked = page.post(path)
    again = signed_in(olga).post(path)

    assert linked.status_code == 200 and "Linked." in linked.content.decode()
    assert SlackIdentity.objects.get().user == olga
    assert again.status_code == 410 and "used already" in again.content.decode()
    slack.press("confirm", "U0NEWCOMER")
    assert Effect.objects.get(pk=alerted.pk).status == "confirmed"


def test_an_expired_or_altered_account_link_says_so(slack, olga, settings):
    token = signing.dumps({"t": TEAM, "u": "U0LATE0001", "n": "n1"}, salt=people.LINK_SALT)
    settings.LEDGER_SLACK_LINK_MAX_AGE = -1  # every link is past its age
    expired = signed_in(olga).get(f"/slack/link/{token}")
    settings.LEDGER_SLACK_LINK_MAX_AGE = 900
    altered = signed_in(olga).post(f"/slack/link/{token[:-2]}xx")

    assert expired.status_code == 410 and "expired" in expired.content.decode()
    assert altered.status_code == 404
    assert not SlackIdentity.objects.exists() and not UsedLink.objects.exists()


def test_a_slack_user_linked_to_another_account_is_not_taken_over(slack, olga, otto):
    link_slack(otto, "U0SHARED01")
    token = signing.dumps({"t": TEAM, "u": "U0SHARED01", "n": "n2"}, salt=people.LINK_SALT)

    answer = signed_in(olga).post(f"/slack/link/{token}")

    assert answer.status_code == 409
    assert SlackIdentity.objects.get().user == otto
    assert not UsedLink.objects.exists()


def sso_account(username: str, email: str, *, verified: bool) -> User:
    user = User.objects.create_user(username, email=email)
    grant(user, OPERATOR)
    Identity.objects.create(issuer="https://idp.example.com", subject=username, user=user,
                            email_verified=verified)  # fmt: skip
    return user


@pytest.mark.parametrize(
    ("trusted", "verified", "twice", "maps"),
    [(True, True, False, True), (False, True, False, False), (True, False, False, False),
     (True, True, True, False)],
    ids=["trusted-verified", "untrusted", "unverified", "two-accounts"],
)  # fmt: skip
def test_a_trusted_workspace_maps_a_slack_user_by_an_sso_accounts_verified_email(
    slack, alerted, settings, trusted, verified, twice, maps
):
    settings.LEDGER_SLACK_EMAIL_TRUSTED_TEAMS = [TEAM] if trusted else []
    sso_account("sso.olga", "Olga@Example.com", verified=verified)
    if twice:
        sso_account("sso.olga2", "olga@example.com", verified=True)
    User.objects.create_user("local.olga", email="olga@example.com")  # never mapped by email
    slack.add_user("U0BYEMAIL1", "olga@example.com")

    slack.press("confirm", "U0BYEMAIL1")

    effect = Effect.objects.get(pk=alerted.pk)
    if maps:
        assert effect.status == "confirmed"
        decision = Effect.objects.get(parent=alerted, kind="decision")
        assert decision.provenance["actor"] == "operator:sso.olga"
    else:
        assert effect.status == "unknown"
        [said] = slack.ephemeral()
        assert "not linked" in said
    assert not SlackIdentity.objects.exists()  # an email mapping is never kept as a link


def test_each_sign_in_says_again_whether_the_provider_verified_the_email(db):
    config = read({
        "LEDGER_OIDC_ISSUER": "https://login.example.com/tenant",
        "LEDGER_OIDC_CLIENT_ID": "effect-ledger", "LEDGER_OIDC_CLIENT_SECRET": "s3cret-s3cret",
        "LEDGER_OIDC_ROLES": '{"ops": "operator"}'})  # fmt: skip
    said = {"iss": "https://login.example.com/tenant", "sub": "s-1", "groups": ["ops"],
            "email": "sam@example.com"}  # fmt: skip

    user = sso_people.bind(config, {**said, "email_verified": True})
    found = people.by_verified_email("SAM@example.com")
    sso_people.bind(config, {**said, "email_verified": "true"})  # a string is not a yes
    gone = people.by_verified_email("sam@example.com")

    assert found == user and gone is None
