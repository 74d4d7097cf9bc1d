"""Stripe's webhooks at POST /api/v1/callbacks/stripe: the events the sandbox's Stripe face
writes, signed as Stripe signs them (the SDK's own `generate_signature_header`), settle the
effect their object's metadata names; a forged, stale or replayed signature is refused with
nothing written; while a secret rotates, either one signs; and the face itself delivers them."""

from __future__ import annotations

import json
import time

import pytest
import stripe

from ledger.models import Effect, WebhookDelivery
from tests.providers.stripe_support import REFUND_TOOL, pay

pytest_plugins = ["tests.providers.stripe_support"]
pytestmark = pytest.mark.django_db

NEW, OLD = "whsec_new_0123456789abcdef", "whsec_old_0123456789abcdef"
DOOR = "/api/v1/callbacks/stripe"


@pytest.fixture(autouse=True)
def stripe_secrets(settings):
    settings.LEDGER_WEBHOOK_SECRETS = {**settings.LEDGER_WEBHOOK_SECRETS, "stripe": NEW}
    settings.LEDGER_WEBHOOK_OLD_SECRETS = {**settings.LEDGER_WEBHOOK_OLD_SECRETS, "stripe": OLD}


def event_of(sandbox, kind: str, key: str) -> bytes:
    """The face's own event of this kind for the object our key names, as Stripe sends it."""
    events = sandbox.http.get("/_sandbox/stripe/events").json()["data"]
    (event,) = [
        e
        for e in events
        if e["type"] == kind and e["data"]["object"]["metadata"].get("ledger_key") == key
    ]
    return json.dumps(event).encode()


def deliver(client, body: bytes, *secrets: str, at: int | None = None, header: str = ""):
    if not header:
        stamp = int(time.time()) if at is None else at
        signed = [
            stripe.WebhookSignature.generate_signature_header(body.decode(), s, stamp)
            for s in secrets
        ]
        # Several v1 values in one header, as Stripe signs while a secret is rolled.
        header = ",".join([signed[0], *(part.split(",", 1)[1] for part in signed[1:])])
    return client.post(
        DOOR, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )


def deliveries_of(sandbox) -> list[dict]:
    return sandbox.http.get("/_sandbox/stripe/webhooks").json()["data"]


def delivered(sandbox) -> bool:
    return {d["status"] for d in deliveries_of(sandbox)} == {"delivered"}


def test_a_succeeded_payment_settles_its_effect_once(client, stripe_sandbox, make_payment):
    effect = make_payment("unknown")
    sent = pay(stripe_sandbox, effect)
    body = event_of(stripe_sandbox, "payment_intent.succeeded", effect.idempotency_key)

    # Signed a second earlier: the new delivery's signature differs even within one second.
    answer = deliver(client, body, NEW, at=int(time.time()) - 1)
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), NEW)
    again = deliver(client, body, header=header)
    replayed = deliver(client, body, header=header)

    assert answer.status_code == 200, answer.content
    assert answer.json() == {"settled": [str(effect.id)], "ignored": 0}
    effect.refresh_from_db()
    assert (effect.status, effect.provider_ref) == ("confirmed", sent["provider_ref"])
    assert again.status_code == 200  # a new signature: a new delivery, the effect unchanged
    assert replayed.status_code == 401 and "already" in replayed.json()["detail"].lower()


def test_a_declined_payment_settles_its_effect_as_failed(client, stripe_sandbox, make_payment):
    effect = make_payment("unknown")
    pay(stripe_sandbox, effect, payment_method="pm_card_chargeDeclined", amount="10.99")
    body = event_of(stripe_sandbox, "payment_intent.payment_failed", effect.idempotency_key)

    assert deliver(client, body, NEW).json()["settled"] == [str(effect.id)]
    effect.refresh_from_db()
    assert effect.status == "failed"


@pytest.mark.parametrize(
    ("signers", "at", "said"),
    [
        (("whsec_forged_0123456789",), None, "matches"),
        ((NEW,), int(time.time()) - 3600, "too old"),
    ],
    ids=["forged", "stale"],
)
def test_a_forged_or_stale_signature_is_refused_with_nothing_written(
    client, stripe_sandbox, make_payment, signers, at, said
):
    effect = make_payment("unknown")
    pay(stripe_sandbox, effect)
    body = event_of(stripe_sandbox, "payment_intent.succeeded", effect.idempotency_key)

    answer = deliver(client, body, *signers, at=at)
    unsigned = client.post(DOOR, data=body, content_type="application/json")

    assert answer.status_code == 401 and said in answer.json()["detail"]
    assert unsigned.status_code == 401
    effect.refresh_from_db()
    assert effect.status == "unknown" and not WebhookDelivery.objects.exists()


def test_an_event_of_the_other_mode_settles_nothing(client, stripe_sandbox, make_payment):
    effect = make_payment("unknown")  # of a test tool, paid in the face's test mode
    pay(stripe_sandbox, effect)
    event = json.loads(event_of(stripe_sandbox, "payment_intent.succeeded", effect.idempotency_key))
    assert event["livemode"] is False
    live = json.dumps({**event, "livemode": True}).encode()

    assert deliver(client, live, NEW).json() == {"settled": [], "ignored": 1}
    effect.refresh_from_db()
    assert effect.status == "unknown"
    # The same event in its own mode settles it.
    answer = deliver(client, json.dumps(event).encode(), NEW)
    assert answer.json() == {"settled": [str(effect.id)], "ignored": 0}


def test_while_a_secret_rotates_either_one_signs(client, stripe_sandbox, make_payment):
    first, second, both = (make_payment("unknown") for _ in range(3))
    for effect in (first, second, both):
        pay(stripe_sandbox, effect)
    kind = "payment_intent.succeeded"

    by_old = deliver(client, event_of(stripe_sandbox, kind, first.idempotency_key), OLD)
    by_new = deliver(client, event_of(stripe_sandbox, kind, second.idempotency_key), NEW)
    by_both = deliver(client, event_of(stripe_sandbox, kind, both.idempotency_key), OLD, NEW)

    assert [a.status_code for a in (by_old, by_new, by_both)] == [200, 200, 200]
    assert set(Effect.objects.filter(status="confirmed").values_list("id", flat=True)) == {
        first.id,
        second.id,
        both.id,
    }


def test_a_refund_settles_by_its_own_key_and_other_events_are_ignored(
    client, stripe_sandbox, make_payment, refund_tool
):
    charge = make_payment("confirmed")
    paid = pay(stripe_sandbox, charge)
    refund = make_payment(
        "unknown", tool=REFUND_TOOL, request={"charge": paid["provider_ref"], "amount": "10.99"}
    )
    from reconcilers.providers import adapter_for

    sent = adapter_for(refund_tool).execute(refund)
    body = event_of(stripe_sandbox, "refund.created", refund.idempotency_key)
    created = event_of(stripe_sandbox, "payment_intent.created", charge.idempotency_key)

    assert sent.status == "confirmed"
    assert deliver(client, body, NEW).json() == {"settled": [str(refund.id)], "ignored": 0}
    assert deliver(client, created, NEW).json() == {"settled": [], "ignored": 0}
    refund.refresh_from_db()
    assert (refund.status, refund.provider_ref) == ("confirmed", sent.provider_ref)
    garbled = deliver(client, b'{"object": "event", "type": 5}', NEW)
    assert garbled.status_code in (400, 422)


@pytest.mark.django_db(transaction=True)
def test_the_face_delivers_its_events_signed_and_they_settle(
    start_sandbox, live_server, monkeypatch, make_payment, tmp_path
):
    monkeypatch.setenv("SANDBOX_STRIPE_WEBHOOK_URL", f"{live_server.url}{DOOR}")
    monkeypatch.setenv("SANDBOX_STRIPE_WEBHOOK_SECRET", NEW)
    from devstack.providers.stripe import caller

    monkeypatch.setenv(caller.API_KEY_ENV, caller.API_KEY)
    sandbox = start_sandbox("payments")
    from tests.providers.stripe_support import declare

    declare(tmp_path, sandbox.url)
    effect = make_payment("unknown")

    pay(sandbox, effect)

    def settled() -> bool:
        effect.refresh_from_db()
        return effect.status == "confirmed"

    assert sandbox.wait_for(settled, timeout=10)
    # Each event travels on a thread of its own: .created may still be on its way.
    assert sandbox.wait_for(lambda: delivered(sandbox), timeout=10)
    assert len(deliveries_of(sandbox)) == 2  # payment_intent.created (ignored) and .succeeded


@pytest.mark.django_db(transaction=True)
def test_held_webhooks_wait_in_the_outbox_until_the_hold_is_lifted(
    start_sandbox, live_server, monkeypatch, make_payment, tmp_path
):
    monkeypatch.setenv("SANDBOX_STRIPE_WEBHOOK_URL", f"{live_server.url}{DOOR}")
    monkeypatch.setenv("SANDBOX_STRIPE_WEBHOOK_SECRET", NEW)
    from devstack.providers.stripe import caller
    from tests.providers.stripe_support import declare, stripe_settings

    monkeypatch.setenv(caller.API_KEY_ENV, caller.API_KEY)
    sandbox = start_sandbox("payments")
    declare(tmp_path, sandbox.url)
    effect = make_payment("unknown")
    assert stripe_settings(sandbox, hold_webhooks=1)["hold_webhooks"] == 1

    pay(sandbox, effect)
    time.sleep(1.5)

    effect.refresh_from_db()
    held = deliveries_of(sandbox)
    assert effect.status == "unknown"
    assert [(d["status"], d["attempts"]) for d in held] == [("pending", 0)] * 2
    stripe_settings(sandbox, hold_webhooks=0)

    def settled() -> bool:
        effect.refresh_from_db()
        return effect.status == "confirmed"

    assert sandbox.wait_for(settled, timeout=10)
    assert sandbox.wait_for(lambda: delivered(sandbox), timeout=10)
