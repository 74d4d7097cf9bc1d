"""SendGrid's Signed Event Webhook at POST /api/v1/callbacks/sendgrid: the fake's signed event
batches settle the effects whose custom args they carry (processed/delivered and bounce as
confirmed, dropped as failed); a forged, stale, tampered, replayed or re-signed replay is
refused with nothing written."""

from __future__ import annotations

import base64
import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from django.test import Client

from devstack.providers.sendgrid.outbox import public_key_b64, signed_headers
from ledger.models import Effect, EffectEvent, WebhookDelivery
from tests.providers.sendgrid_support import request, sent

pytest_plugins = ["tests.providers.sendgrid_fixtures"]
pytestmark = pytest.mark.django_db

PATH = "/api/v1/callbacks/sendgrid"
SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
P256_ORDER = int("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551", 16)


@pytest.fixture
def fake_key(sendgrid, settings) -> str:
    """The fake's verification key, configured as the sendgrid provider's secret."""
    key = sendgrid._sandbox("GET", "public_key")["public_key"]
    settings.LEDGER_WEBHOOK_SECRETS = {**settings.LEDGER_WEBHOOK_SECRETS, "sendgrid": key}
    return key


@pytest.fixture
def own_key(settings, email_tool) -> ec.EllipticCurvePrivateKey:
    """A key pair of the test's own (it plays SendGrid), its public half configured."""
    key = ec.generate_private_key(ec.SECP256R1())
    secrets = {**settings.LEDGER_WEBHOOK_SECRETS, "sendgrid": public_key_b64(key)}
    settings.LEDGER_WEBHOOK_SECRETS = secrets
    return key


def post(body: bytes, headers: dict[str, str]):
    return Client().post(PATH, data=body, content_type="application/json", headers=headers)


def written() -> tuple[int, int]:
    return EffectEvent.objects.count(), WebhookDelivery.objects.count()


def events_for(effect: Effect, *names: str, ref: str = "xmid") -> bytes:
    events = [
        {"email": "ada@example.com", "timestamp": int(time.time()), "event": name,
         "sg_event_id": f"ev-{n}", "sg_message_id": f"{ref}.filterdrecv-0.0",
         "ledger_key": effect.idempotency_key, "ledger_effect": str(effect.id)}
        for n, name in enumerate(names)
    ]  # fmt: skip
    return json.dumps(events).encode()


def test_the_fakes_signed_events_settle_what_sendgrid_did(
    sendgrid, email_tool, fake_key, make_email
):
    outcomes = {}
    for to, status in [("ada@example.com", "confirmed"), ("drop@example.com", "failed"),
                       ("bounce@example.com", "confirmed")]:  # fmt: skip
        effect = make_email("unknown", request=request(to=to))
        outcomes[effect.id] = (status, sent(sendgrid, effect)["provider_ref"])

    for batch in sendgrid._sandbox("GET", "outbox")["data"]:
        answer = post(batch["body"].encode(), batch["headers"])
        assert answer.status_code == 200, answer.content
        assert len(answer.json()["settled"]) >= 1

    for effect in Effect.objects.filter(id__in=outcomes):
        assert (effect.status, effect.provider_ref) == outcomes[effect.id]
        assert "email" not in effect.response  # the recipient's address is not kept
    assert len(sendgrid.transactions()) == 3


def test_a_replay_and_a_re_signed_replay_are_refused_with_nothing_written(
    own_key, email_tool, make_email
):
    effect = make_email("unknown")
    body = events_for(effect, "processed", "delivered")
    headers = signed_headers(own_key, body, int(time.time()))
    assert post(body, headers).status_code == 200
    before = written()

    assert post(body, headers).status_code == 401
    # An ECDSA signature (r, s) has a twin (r, n - s) that verifies as well.
    r, s = decode_dss_signature(base64.b64decode(headers[SIGNATURE]))
    twin = base64.b64encode(encode_dss_signature(r, P256_ORDER - s)).decode()
    answer = post(body, {**headers, SIGNATURE: twin})
    assert answer.status_code == 401 and "already used" in answer.json()["detail"]
    assert written() == before


@pytest.mark.parametrize(
    "spoil",
    ["forged", "stale", "future", "tampered", "missing", "not-base64", "not-a-time"],
)
def test_a_bad_signature_is_refused_with_nothing_written(own_key, email_tool, make_email, spoil):
    effect = make_email("unknown")
    body = events_for(effect, "delivered")
    now = int(time.time())
    signer = ec.generate_private_key(ec.SECP256R1()) if spoil == "forged" else own_key
    stamp = {"stale": now - 301, "future": now + 301}.get(spoil, now)
    headers = signed_headers(signer, body, stamp)
    if spoil == "tampered":
        body = body.replace(b"delivered", b"dropped\x20\x20")
    if spoil == "missing":
        del headers[SIGNATURE]
    if spoil == "not-base64":
        headers[SIGNATURE] = "%%%"
    if spoil == "not-a-time":
        headers["X-Twilio-Email-Event-Webhook-Timestamp"] = "yesterday"
    before = written()

    answer = post(body, headers)
    assert answer.status_code == 401, answer.content
    assert written() == before
    effect.refresh_from_db()
    assert effect.status == "unknown"


def test_the_previous_key_still_verifies_while_it_is_replaced(
    own_key, email_tool, make_email, settings
):
    newer = ec.generate_private_key(ec.SECP256R1())
    settings.LEDGER_WEBHOOK_OLD_SECRETS = {
        **settings.LEDGER_WEBHOOK_OLD_SECRETS,
        "sendgrid": public_key_b64(own_key),
    }
    settings.LEDGER_WEBHOOK_SECRETS = {
        **settings.LEDGER_WEBHOOK_SECRETS,
        "sendgrid": public_key_b64(newer),
    }
    first, second = make_email("unknown"), make_email("unknown")
    for effect, key in ((first, own_key), (second, newer)):
        body = events_for(effect, "delivered")
        assert post(body, signed_headers(key, body, int(time.time()))).status_code == 200
        effect.refresh_from_db()
        assert effect.status == "confirmed"


def test_events_that_say_nothing_of_our_effects_are_ignored(own_key, email_tool, make_email):
    effect = make_email("unknown")
    ours = json.loads(events_for(effect, "open", "click", "spamreport"))
    strangers = json.loads(events_for(effect, "delivered"))
    strangers[0]["ledger_key"] = "someone-elses-key"
    unlabelled = {"event": "delivered", "sg_message_id": "x.y", "timestamp": 1}
    body = json.dumps([*ours, *strangers, unlabelled]).encode()

    answer = post(body, signed_headers(own_key, body, int(time.time())))
    assert answer.status_code == 200
    assert answer.json() == {"settled": [], "ignored": 1}
    effect.refresh_from_db()
    assert effect.status == "unknown"


@pytest.mark.parametrize("body", [b'{"event": "delivered"}', b"[1, 2]", b"not json"])
def test_a_signed_body_that_is_not_an_array_of_events_is_refused(own_key, email_tool, body):
    before = written()
    answer = post(body, signed_headers(own_key, body, int(time.time())))
    assert 400 <= answer.status_code < 500 and answer.status_code != 401, answer.content
    assert written() == before
