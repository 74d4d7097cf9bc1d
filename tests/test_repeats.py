"""Repeated intents and outcomes are idempotent; a changed request under a key conflicts."""

from __future__ import annotations

from ledger.models import Effect, EffectEvent
from tests.helpers import events_of


def test_a_repeated_intent_returns_the_same_effect_with_200(alice):
    first = alice.intent()
    again = alice.intent(expect=200)
    assert again["id"] == first["id"]
    assert again["idempotency_key"] == first["idempotency_key"]
    assert Effect.objects.count() == 1
    assert len(events_of(first["id"])) == 1


def test_equal_numbers_written_differently_are_the_same_request(alice):
    first = alice.intent(request={"amount": 10.10, "currency": "EUR"})
    again = alice.intent(request={"currency": "EUR", "amount": 10.1}, expect=200)
    assert again["id"] == first["id"]


def test_a_different_request_under_the_same_key_is_a_conflict(alice):
    first = alice.intent(request={"amount": "10.00", "currency": "EUR"})
    response = alice.post(
        "/effects",
        {
            "run_id": "run-1",
            "step_id": "step-1",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "10.01", "currency": "EUR"},
        },
    )
    assert response.status_code == 409
    assert response.json()["error"] == "effect_key_conflict"
    assert response.json()["effect_id"] == first["id"]


def test_case_and_whitespace_are_not_folded_in_the_request_hash(alice):
    alice.intent(request={"note": "Hello"})
    response = alice.post(
        "/effects",
        {
            "run_id": "run-1",
            "step_id": "step-1",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"note": "hello "},
        },
    )
    assert response.status_code == 409


def test_unicode_forms_are_normalised_in_the_request_hash(alice):
    first = alice.intent(request={"name": "Zoe\u0301"})  # e + combining acute
    again = alice.intent(request={"name": "Zo\u00e9"}, expect=200)  # precomposed é
    assert again["id"] == first["id"]


def test_an_explicit_effect_key_identifies_the_operation_across_runs(alice):
    first = alice.intent(run_id="run-1", step_id="a", effect_key="order-77:charge")
    again = alice.intent(run_id="run-2", step_id="b", effect_key="order-77:charge", expect=200)
    assert again["id"] == first["id"]


def test_the_idempotency_key_is_stable_and_carries_no_payload(alice):
    effect = alice.intent(request={"amount": "99.00", "secret_note": "xyz"})
    assert effect["idempotency_key"].startswith("el_")
    assert "99" not in effect["idempotency_key"]
    from ledger.policy import digests
    assert effect["idempotency_key"] == digests.idempotency_key(alice.agent.id, "run-1:step-1")


def test_two_agents_with_the_same_effect_key_get_different_effects_and_keys(alice, bob):
    mine = alice.intent()
    theirs = bob.intent()
    assert mine["id"] != theirs["id"]
    assert mine["idempotency_key"] != theirs["idempotency_key"]


def test_a_repeated_outcome_changes_nothing(alice):
    effect = alice.intent(claim=True)
    token = effect["lease_token"]
    done = alice.outcome(effect["id"], token, provider_ref="ch_1", response={"id": "ch_1"})
    version = Effect.objects.get(pk=effect["id"]).version
    count = EffectEvent.objects.count()
    again = alice.outcome(effect["id"], token, provider_ref="ch_1", response={"id": "ch_1"})
    assert again == done
    assert Effect.objects.get(pk=effect["id"]).version == version
    assert EffectEvent.objects.count() == count


def test_a_different_outcome_from_the_same_token_after_the_first_is_refused(alice):
    effect = alice.intent(claim=True)
    token = effect["lease_token"]
    alice.outcome(effect["id"], token, provider_ref="ch_1")
    refused = alice.outcome(effect["id"], token, "failed", expect=409)
    assert refused["error"] == "stale_lease"
    assert Effect.objects.get(pk=effect["id"]).status == "confirmed"


def test_intent_with_claim_records_two_events_in_one_call(alice):
    effect = alice.intent(claim=True, owner="w1", claim_id="c1", lease_seconds=30)
    assert effect["status"] == "dispatching"
    assert effect["lease_seconds"] == 30
    assert [(e.from_status, e.to_status) for e in events_of(effect["id"])] == [
        ("", "planned"),
        ("planned", "dispatching"),
    ]


def test_a_repeated_intent_with_claim_and_the_same_claim_id_returns_the_same_lease(alice):
    first = alice.intent(claim=True, claim_id="c1")
    again = alice.intent(claim=True, claim_id="c1", expect=200)
    assert again["lease_token"] == first["lease_token"]
    assert again["attempt"] == 1


def test_a_repeated_intent_with_claim_of_a_confirmed_effect_replays_its_result(alice):
    first = alice.intent(claim=True, claim_id="c1")
    alice.outcome(first["id"], first["lease_token"], provider_ref="ch_9", response={"ok": True})
    again = alice.intent(claim=True, claim_id="c2", expect=200)
    assert again["status"] == "confirmed"
    assert again["provider_ref"] == "ch_9"
    assert again["response"] == {"ok": True}
    assert again["lease_token"] is None


def test_not_sent_returns_the_effect_to_planned_for_another_attempt(alice):
    effect = alice.intent(claim=True)
    planned = alice.outcome(
        effect["id"], effect["lease_token"], "not_sent", error="429 before send"
    )
    assert planned["status"] == "planned"
    assert planned["error"] == "429 before send"
    again = alice.claim(effect["id"])
    assert again["attempt"] == 2


def test_awaiting_confirmation_can_be_finished_by_the_worker_that_parked_it(alice):
    effect = alice.intent(claim=True)
    token = effect["lease_token"]
    parked = alice.outcome(effect["id"], token, "awaiting_confirmation", provider_ref="ch_p")
    assert parked["status"] == "awaiting_confirmation"
    assert Effect.objects.get(pk=effect["id"]).next_check_at is not None
    done = alice.outcome(effect["id"], token, "confirmed", provider_ref="ch_p")
    assert done["status"] == "confirmed"
    assert done["resolved_at"] is not None
