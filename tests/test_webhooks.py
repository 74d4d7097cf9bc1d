"""Signed provider callbacks: signature, replay, unknown effects."""

from __future__ import annotations

import json
import time

from django.test import Client

from ledger.api.webhooks import sign
from ledger.models import Effect, Halt, ReviewItem

SECRET = "test-webhook-secret-0123456789"


def _deliver(body: dict, *, secret: str = SECRET, timestamp: int | None = None, header=None):
    raw = json.dumps(body).encode()
    signature = header or sign(secret, timestamp or int(time.time()), raw)
    return Client().post(
        "/api/v1/webhooks/sandbox-pay",
        data=raw,
        content_type="application/json",
        headers={"X-Ledger-Signature": signature},
    )


def _awaiting(alice) -> dict:
    effect = alice.intent(claim=True)
    return alice.outcome(effect["id"], effect["lease_token"], "awaiting_confirmation")


def test_a_signed_callback_confirms_the_effect_it_names(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = _awaiting(alice)
    response = _deliver(
        {
            "idempotency_key": effect["idempotency_key"],
            "status": "confirmed",
            "provider_ref": "ch_7",
        }
    )
    assert response.status_code == 200, response.content
    stored = Effect.objects.get(pk=effect["id"])
    assert (stored.status, stored.provider_ref) == ("confirmed", "ch_7")
    assert stored.events.latest("id").actor == "provider:sandbox-pay"


def test_a_replayed_callback_is_refused(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = _awaiting(alice)
    body = {"idempotency_key": effect["idempotency_key"], "status": "confirmed"}
    raw = json.dumps(body).encode()
    header = sign(SECRET, int(time.time()), raw)
    assert _deliver(body, header=header).status_code == 200
    replay = _deliver(body, header=header)
    assert replay.status_code == 401
    assert "replayed" in replay.json()["detail"]


def test_a_stale_signature_is_refused(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = _awaiting(alice)
    response = _deliver(
        {"idempotency_key": effect["idempotency_key"], "status": "confirmed"},
        timestamp=int(time.time()) - 3600,
    )
    assert response.status_code == 401
    assert Effect.objects.get(pk=effect["id"]).status == "awaiting_confirmation"


def test_a_wrong_secret_is_refused(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = _awaiting(alice)
    response = _deliver(
        {"idempotency_key": effect["idempotency_key"], "status": "failed"}, secret="guess" * 5
    )
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert Effect.objects.get(pk=effect["id"]).status == "awaiting_confirmation"


def test_an_unknown_idempotency_key_is_404(db, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    response = _deliver({"idempotency_key": "el_nothing", "status": "confirmed"})
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_an_unconfigured_provider_is_404(db, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {}
    response = _deliver({"idempotency_key": "el_x", "status": "confirmed"})
    assert response.status_code == 404


def test_a_callback_for_a_settled_effect_is_refused(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    response = _deliver(
        {"idempotency_key": effect["idempotency_key"], "status": "failed", "provider_ref": "ch_1"}
    )
    assert response.status_code == 409
    assert Effect.objects.get(pk=effect["id"]).status == "confirmed"


def _confirm_with_charge(effect: dict, amount: str):
    """The provider's callback carrying its charge record (the request was 10.00 EUR)."""
    charge = {
        "id": "ch_9",
        "status": "succeeded",
        "amount": amount,
        "currency": "EUR",
        "account": "acct_42",
    }
    body = {
        "idempotency_key": effect["idempotency_key"],
        "status": "confirmed",
        "provider_ref": "ch_9",
        "response": charge,
    }
    return _deliver(body)


def test_a_confirmation_whose_charge_differs_from_the_request_goes_to_review(alice, settings):
    from ledger.models import ReviewItem

    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = _awaiting(alice)
    assert _confirm_with_charge(effect, "99.00").status_code == 200
    assert Effect.objects.get(pk=effect["id"]).status == "unknown"
    assert ReviewItem.objects.get(effect_id=effect["id"]).reason == "provider_mismatch"
    moved = Effect.objects.get(pk=effect["id"]).events.latest("id")
    assert moved.data["mismatches"] == ["amount"]
    assert moved.data["record"]["amount"] == "99.00"


def test_a_second_mismatching_confirmation_of_an_unknown_effect_is_kept_too(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = _awaiting(alice)
    assert _confirm_with_charge(effect, "99.00").status_code == 200

    assert _confirm_with_charge(effect, "98.00").status_code == 200

    kept = Effect.objects.get(pk=effect["id"]).events.latest("id")
    assert (kept.kind, kept.actor, kept.data["record"]["amount"]) == (
        "reconciliation",
        "provider:sandbox-pay",
        "98.00",
    )


def test_a_confirmation_whose_charge_matches_the_request_confirms(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = _awaiting(alice)
    assert _confirm_with_charge(effect, "10.00").status_code == 200
    assert Effect.objects.get(pk=effect["id"]).status == "confirmed"


def test_a_callback_naming_another_ref_for_a_settled_effect_is_kept_and_opens_a_duplicate(
    alice, settings, tools
):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    tools["charge_card"].halt_on_duplicate = True
    tools["charge_card"].save()
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")

    response = _deliver(
        {
            "idempotency_key": effect["idempotency_key"],
            "status": "confirmed",
            "provider_ref": "ch_2",
        }
    )

    # Taken (a retried delivery would add nothing), kept, and put before a person.
    assert response.status_code == 200, response.content
    stored = Effect.objects.get(pk=effect["id"])
    assert (stored.status, stored.provider_ref) == ("confirmed", "ch_1")
    late = stored.events.latest("id")
    assert (late.kind, late.reason, late.data["provider_ref"]) == (
        "late_outcome",
        "duplicate",
        "ch_2",
    )
    item = ReviewItem.objects.get(effect_id=effect["id"])
    assert (item.reason, item.severity) == ("duplicate", 3)
    assert Halt.objects.filter(scope="tool", value="charge_card", resumed_at=None).exists()


def test_a_callback_for_an_effect_sent_again_on_a_proof_of_absence_opens_a_duplicate(
    alice, settings
):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "not_sent")  # planned, attempt 1

    response = _deliver(
        {
            "idempotency_key": effect["idempotency_key"],
            "status": "confirmed",
            "provider_ref": "ch_1",
        }
    )

    assert response.status_code == 200, response.content
    assert Effect.objects.get(pk=effect["id"]).status == "planned"
    assert ReviewItem.objects.get(effect_id=effect["id"]).reason == "duplicate"
    # And it is not sent again until a person has looked.
    refused = alice.post(f"/effects/{effect['id']}/claim", {"owner": "w1"})
    assert refused.status_code == 409


def test_the_lease_holders_report_after_a_callback_settled_the_same_is_taken_as_a_repeat(
    alice, settings
):
    """A provider's callback can land before the worker that made the call reports it (the
    Stripe face signs every payment at once): the worker's agreeing report is not a lost lease."""
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": SECRET}
    effect = alice.intent(claim=True)
    body = {"idempotency_key": effect["idempotency_key"], "status": "confirmed"}
    assert _deliver({**body, "provider_ref": "ch_7"}).status_code == 200

    agreeing = alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_7")
    other_ref = alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_8", expect=409)
    failed = alice.outcome(effect["id"], effect["lease_token"], "failed", expect=409)

    assert agreeing["status"] == "confirmed"
    assert other_ref["error"] == failed["error"] == "stale_lease"
    stored = Effect.objects.get(pk=effect["id"])
    assert (stored.status, stored.provider_ref) == ("confirmed", "ch_7")
    late = stored.events.filter(kind="late_outcome").order_by("id")
    assert [e.data.get("provider_ref") for e in late][:1] == ["ch_7"]
    # Two refs for one effect: the provider may hold two charges.
    assert ReviewItem.objects.filter(effect=stored, reason="duplicate").exists()
