"""Leases with fencing tokens, timed on the database clock."""

from __future__ import annotations

from ledger.models import Effect
from tests.helpers import events_of, expire_lease


def test_a_claim_returns_a_token_and_the_granted_lease(alice):
    effect = alice.intent()
    claimed = alice.claim(effect["id"], claim_id="c-1", lease_seconds=30)
    assert claimed["status"] == "dispatching"
    assert claimed["attempt"] == 1
    assert claimed["lease_token"]
    assert claimed["lease_seconds"] == 30
    assert claimed["lease_owner"] == "worker-1"


def test_the_lease_expiry_comes_from_the_database_clock(alice):
    effect = alice.intent()
    alice.claim(effect["id"], lease_seconds=120)
    stored = Effect.objects.extra(select={"left": "lease_expires_at - now()"}).get(pk=effect["id"])
    # The whole test runs in one transaction, so now() is fixed: exactly the granted lease.
    assert stored.left.total_seconds() == 120


def test_a_repeated_claim_with_the_same_claim_id_gets_the_same_token(alice):
    effect = alice.intent()
    first = alice.claim(effect["id"], claim_id="c-1")
    again = alice.claim(effect["id"], claim_id="c-1")
    assert again["lease_token"] == first["lease_token"]
    assert again["attempt"] == first["attempt"] == 1
    assert len(events_of(effect["id"])) == 2  # intent and one claim


def test_a_second_claim_with_another_claim_id_is_refused(alice):
    effect = alice.intent()
    alice.claim(effect["id"], claim_id="c-1")
    refused = alice.claim(effect["id"], claim_id="c-2", expect=409)
    assert refused["error"] == "invalid_transition"


def test_a_repeated_claim_id_after_the_lease_expired_is_refused(alice):
    effect = alice.intent()
    alice.claim(effect["id"], claim_id="c-1")
    expire_lease(effect["id"])
    assert alice.claim(effect["id"], claim_id="c-1", expect=409)["error"] == "invalid_transition"


def test_a_heartbeat_extends_a_live_lease(alice):
    effect = alice.intent()
    claimed = alice.claim(effect["id"], lease_seconds=5)
    response = alice.post(
        f"/effects/{effect['id']}/heartbeat",
        {"lease_token": claimed["lease_token"], "lease_seconds": 600},
    )
    assert response.status_code == 200, response.content
    assert response.json()["lease_seconds"] == 600
    stored = Effect.objects.extra(select={"left": "lease_expires_at - now()"}).get(pk=effect["id"])
    assert stored.left.total_seconds() == 600


def test_a_heartbeat_cannot_revive_an_expired_lease(alice):
    effect = alice.intent()
    claimed = alice.claim(effect["id"])
    expire_lease(effect["id"])
    response = alice.post(
        f"/effects/{effect['id']}/heartbeat", {"lease_token": claimed["lease_token"]}
    )
    assert response.status_code == 409
    assert response.json()["error"] == "stale_lease"


def test_a_heartbeat_with_a_wrong_token_is_refused(alice):
    effect = alice.intent()
    alice.claim(effect["id"])
    response = alice.post(f"/effects/{effect['id']}/heartbeat", {"lease_token": "not-mine"})
    assert response.status_code == 409
    assert response.json()["error"] == "stale_lease"


def test_an_expired_token_cannot_write_an_outcome_but_its_report_is_kept(alice):
    effect = alice.intent()
    claimed = alice.claim(effect["id"])
    expire_lease(effect["id"])
    refused = alice.outcome(effect["id"], claimed["lease_token"], provider_ref="ch_1", expect=409)
    assert refused["error"] == "stale_lease"
    assert Effect.objects.get(pk=effect["id"]).status == "dispatching"
    late = events_of(effect["id"])[-1]
    assert late.kind == "late_outcome"
    assert late.data["outcome"] == "confirmed"
    assert late.data["provider_ref"] == "ch_1"


def test_a_superseded_token_cannot_write_after_recovery_and_reclaim(alice):
    effect = alice.intent(tool="get_balance", request={"account": "a1"})
    first = alice.claim(effect["id"], claim_id="first")
    expire_lease(effect["id"])
    recovery = alice.post("/recovery", {"run_id": "run-1"}).json()
    assert [item["action"] for item in recovery["effects"]] == ["retry_safe"]
    second = alice.claim(effect["id"], claim_id="second")
    assert second["attempt"] == 1  # the lost lease gave its attempt back
    assert second["lease_token"] != first["lease_token"]

    refused = alice.outcome(effect["id"], first["lease_token"], expect=409)
    assert refused["error"] == "stale_lease"
    done = alice.outcome(effect["id"], second["lease_token"])
    assert done["status"] == "confirmed"
    kinds = [e.kind for e in events_of(effect["id"])]
    assert kinds.count("late_outcome") == 1


def test_a_late_outcome_with_a_different_provider_ref_opens_a_duplicate_review(alice):
    from ledger.models import ReviewItem

    effect = alice.intent(tool="get_balance", request={"account": "a1"})
    first = alice.claim(effect["id"])
    expire_lease(effect["id"])
    alice.post("/recovery", {})
    second = alice.claim(effect["id"])
    alice.outcome(effect["id"], second["lease_token"], provider_ref="ref-B")
    alice.outcome(effect["id"], first["lease_token"], provider_ref="ref-A", expect=409)
    item = ReviewItem.objects.get(effect_id=effect["id"])
    assert item.reason == "duplicate"
    assert item.resolved_at is None


def test_the_attempt_cap_is_enforced_at_claim_time(alice):
    effect = alice.intent(tool="get_balance", request={"account": "a1"})
    for attempt in (1, 2, 3):
        claimed = alice.claim(effect["id"])
        assert claimed["attempt"] == attempt
        alice.outcome(effect["id"], claimed["lease_token"], "not_sent")
    refused = alice.claim(effect["id"], expect=409)
    assert refused["error"] == "attempts_exhausted"
    stored = Effect.objects.get(pk=effect["id"])
    assert (stored.status, stored.attempt) == ("planned", 3)


def test_a_whole_number_written_with_a_decimal_point_is_a_valid_lease(alice):
    effect = alice.intent()
    response = alice.post(f"/effects/{effect['id']}/claim", raw='{"lease_seconds": 30.0}')
    assert response.status_code == 200, response.content
    assert response.json()["lease_seconds"] == 30
