"""Slack's Events API at POST /api/v1/callbacks/slack: Slack's request signing checked through
slack_sdk's SignatureVerifier, the Request URL's url_verification answered with its challenge,
a message event carrying our metadata settling its effect; forged, stale, malformed and
replayed requests refused with nothing written; the fake's own signed deliveries settle."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client
from slack_sdk.signature import SignatureVerifier

from devstack.providers.slack import caller
from ledger.models import Effect, EffectEvent, WebhookDelivery
from tests.providers.slack_support import SIGNING_SECRET, declare, fake_args

pytest_plugins = ["tests.providers.slack_fixtures"]
pytestmark = pytest.mark.django_db
DOOR = "/api/v1/callbacks/slack"


@pytest.fixture
def secrets(settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"slack": SIGNING_SECRET}
    settings.LEDGER_WEBHOOK_OLD_SECRETS = {}
    return settings


def signed(body: dict[str, Any], *, secret: str = SIGNING_SECRET, at: int | None = None) -> dict:
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()) if at is None else at)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=raw)
    return {"raw": raw, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}


def deliver(request: dict, **headers: str):
    raw = request["raw"]
    sent = {k: v for k, v in request.items() if k != "raw"} | headers
    return Client().post(DOOR, data=raw, content_type="application/json", headers=sent)


def message_event(effect: Effect, ts: str = "1796534404.171604", **event: Any) -> dict:
    metadata = {
        "event_type": caller.EVENT_TYPE,
        "event_payload": {"ledger_key": effect.idempotency_key, "ledger_effect": str(effect.id)},
    }
    inner = {"type": "message", "channel": caller.CHANNEL, "ts": ts, "text": "hi"}
    return {
        "type": "event_callback",
        "team_id": "T0FAKETEAM",
        "api_app_id": "A0FAKEAPP1",
        "event_id": "Ev0001",
        "event_time": 1796534404,
        "event": {**inner, "metadata": metadata, **event},
    }


def test_the_request_urls_verification_is_answered_with_its_challenge(slack_tool, secrets):
    check = {"token": "legacy", "challenge": "3eZbrw1aBm2rZgRN", "type": "url_verification"}

    answer = deliver(signed(check))
    unsigned = Client().post(DOOR, data=json.dumps(check), content_type="application/json")

    assert (answer.status_code, answer.json()) == (200, {"challenge": "3eZbrw1aBm2rZgRN"})
    assert unsigned.status_code == 401
    assert not WebhookDelivery.objects.exists()


def test_a_message_event_with_our_metadata_settles_its_effect(slack_tool, secrets, make_message):
    effect = make_message("dispatching")
    other = make_message("dispatching")

    answer = deliver(signed(message_event(effect)))
    edited = deliver(signed(message_event(other, subtype="message_changed")))

    assert answer.status_code == 200, answer.content
    assert answer.json() == {"settled": [str(effect.id)], "ignored": 0}
    stored = Effect.objects.get(pk=effect.pk)
    assert (stored.status, stored.provider_ref) == ("confirmed", "p1796534404171604")
    assert stored.response == {"channel": caller.CHANNEL, "ref": stored.provider_ref,
                               "event_id": "Ev0001"}  # fmt: skip
    assert edited.json() == {"settled": [], "ignored": 0}
    assert Effect.objects.get(pk=other.pk).status == "dispatching"


def test_slacks_retry_is_taken_and_a_replay_is_refused(slack_tool, secrets, make_message):
    effect = make_message("dispatching")
    first = signed(message_event(effect))

    answer = deliver(first)
    replayed = deliver(first)
    events = EffectEvent.objects.filter(effect_id=effect.id).count()
    retried = deliver(signed(message_event(effect), at=int(time.time()) + 1), **{
        "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})  # fmt: skip

    assert answer.status_code == 200
    assert replayed.status_code == 401 and "already used" in replayed.json()["detail"]
    assert retried.status_code == 200  # a new signature: Slack's retry, applied idempotently
    assert EffectEvent.objects.filter(effect_id=effect.id).count() == events
    assert WebhookDelivery.objects.count() == 2


@pytest.mark.parametrize(
    "forgery",
    ["wrong-secret", "stale", "future", "body-changed", "no-signature", "bad-timestamp",
     "not-ascii"],
)  # fmt: skip
def test_a_forged_stale_or_malformed_request_is_refused_with_nothing_written(
    slack_tool, secrets, make_message, forgery
):
    effect = make_message("dispatching")
    body = message_event(effect)
    request = {
        "wrong-secret": lambda: signed(body, secret="another-apps-secret"),
        "stale": lambda: signed(body, at=int(time.time()) - 310),
        "future": lambda: signed(body, at=int(time.time()) + 310),
        "body-changed": lambda: {**signed(body), "raw": json.dumps(body).encode() + b" "},
        "no-signature": lambda: {"raw": json.dumps(body).encode()},
        "bad-timestamp": lambda: {**signed(body), "X-Slack-Request-Timestamp": "12e9"},
        "not-ascii": lambda: {**signed(body), "X-Slack-Signature": "v0=é" + "0" * 63},
    }[forgery]()

    answer = deliver(request)

    assert answer.status_code == 401, answer.content
    assert not WebhookDelivery.objects.exists()
    assert Effect.objects.get(pk=effect.pk).status == "dispatching"


def test_the_old_secret_still_verifies_while_it_rotates(slack_tool, secrets, make_message):
    secrets.LEDGER_WEBHOOK_SECRETS = {"slack": "the-new-signing-secret-0123456789"}
    secrets.LEDGER_WEBHOOK_OLD_SECRETS = {"slack": SIGNING_SECRET}
    effect = make_message("dispatching")

    assert deliver(signed(message_event(effect))).status_code == 200
    assert Effect.objects.get(pk=effect.pk).status == "confirmed"


def test_an_event_whose_payload_slack_stripped_names_no_effect(
    slack_tool, secrets, make_message, caplog
):
    effect = make_message("dispatching")
    stripped = message_event(effect, metadata={"event_type": caller.EVENT_TYPE,
                                               "event_payload": {}})  # fmt: skip
    unreadable = deliver({**signed({"type": "event_callback", "event": "x"})})

    answer = deliver(signed(stripped))

    assert answer.json() == {"settled": [], "ignored": 0}
    assert "declare the effect_ledger_effect metadata event" in caplog.text
    assert Effect.objects.get(pk=effect.pk).status == "dispatching"
    assert unreadable.status_code == 422


@pytest.mark.django_db(transaction=True)
def test_the_fakes_signed_events_settle_what_it_posted(
    start_sandbox, live_server, tmp_path, alice, monkeypatch, settings
):
    settings.LEDGER_WEBHOOK_SECRETS = {"slack": SIGNING_SECRET}
    monkeypatch.setenv(caller.TOKEN_ENV, caller.TOKEN)
    url = f"{live_server.url}{DOOR}"
    fake = start_sandbox(
        "slack", *fake_args("--events-url", url, "--signing-secret", SIGNING_SECRET)
    )
    declare(tmp_path, fake.url)
    effect = alice.intent(tool="notify_slack", claim=True, request={"text": "Build green."})
    alice.outcome(effect["id"], effect["lease_token"], "unknown")  # the answer was lost

    verified = fake.http.post("/_sandbox/url_verification").json()
    sent = caller.send(fake.url, effect, {"text": "Build green."}, "")
    delivered = fake.wait_for(
        lambda: [d for d in fake.http.get("/_sandbox/events").json()["data"]
                 if d["status"] == "delivered"])  # fmt: skip

    assert verified["status"] == 200 and verified["answered"], verified
    assert delivered and delivered[0]["body"]["event"]["metadata"]["event_payload"]
    stored = Effect.objects.get(pk=effect["id"])
    assert (stored.status, stored.provider_ref) == ("confirmed", sent["provider_ref"])
