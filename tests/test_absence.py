"""Proofs of absence from a lookup, tail checks and duplicates (ledger.rules.lookup_absence,
reconcilers.reconcile, reconcilers.tailcheck, ledger.containment.duplicates).

Providers are sandbox subprocesses over real HTTP; time passes by back-dating rows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from ledger.effects.recovery import database_now
from ledger.models import Halt, ReviewItem
from reconcilers.reconcile import process_one
from reconcilers.tailcheck import run_due
from tests.factories import SETTLED, charge_at, checks_of, reviews_of, stored
from tests.helpers import assert_error, events_of
from tests.test_reconcile import lease_ran_out, lost, on_last_attempt, statuses_of, time_passes


@pytest.fixture
def lookup_only(tools, provider) -> Any:
    """charge_card as a provider that ignores keys but whose search by our reference is
    complete: declared `lookup_proves_absence` with its bounds."""
    tool = tools["charge_card"]
    tool.honours_key = False
    tool.key_ttl = None
    tool.lookup_proves_absence = True
    tool.call_timeout = timedelta(seconds=30)
    tool.search_lag = timedelta(seconds=30)
    tool.settle_after = timedelta(minutes=2)
    tool.lookup_horizon = timedelta(days=1)
    tool.halt_on_duplicate = True
    tool.save()
    return provider


def tail_due(effect: dict) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET tail_check_at = now() - interval '1 second', "
            "resolved_at = resolved_at - interval '1 hour' WHERE id = %s",
            [effect["id"]],
        )


def last_transition(effect: dict) -> Any:
    return [e for e in events_of(effect["id"]) if e.kind == "transition"][-1]


# --- A complete lookup proves absence --------------------------------------------------------


def test_a_settled_not_found_from_a_complete_lookup_returns_the_effect_to_planned(
    alice, lookup_only
):
    effect = lost(alice, seconds_ago=SETTLED)

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "planned"
    assert reviews_of(effect) == []
    moved = last_transition(effect)
    assert (moved.reason, moved.data["proof"]) == ("never_received", "complete_lookup")
    assert moved.data["lookup"]["listed"] is True
    # One more lookup once the retry has resolved: settle_after + call_timeout on.
    assert after.tail_check_at is not None
    # A lost lease gave its attempt back (ledger/sql/lost_leases.sql): a crash is not a try.
    assert alice.claim(effect["id"])["attempt"] == 1


def test_a_not_found_taken_before_the_last_dispatch_settled_proves_nothing_yet(alice, lookup_only):
    effect = lost(alice, seconds_ago=30)

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "dispatching"
    assert "planned" not in statuses_of(effect)
    # Asked again when it could prove absence: the lease's end plus settle_after.
    assert after.next_check_at == after.lease_expires_at + timedelta(minutes=2)
    assert reviews_of(effect) == []


def test_a_not_found_past_the_lookup_horizon_proves_nothing_and_goes_to_review(alice, lookup_only):
    effect = lost(alice, seconds_ago=SETTLED)
    time_passes(effect["id"], timedelta(days=2).total_seconds())

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("not_found_unproven", True)]


def test_a_not_found_of_a_lookup_that_does_not_prove_absence_goes_to_review(
    alice, tools, lookup_only
):
    tools["charge_card"].lookup_proves_absence = False
    tools["charge_card"].save()
    effect = lost(alice, seconds_ago=SETTLED)

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("not_found_unproven", True)]


def test_a_single_object_not_found_never_proves_absence(alice, tools, lookup_only):
    # The same search answered as one object ("none") instead of a list.
    tool = tools["charge_card"]
    tool.reconciler = "http_lookup"
    tool.reconciler_config = {
        "url": f"{lookup_only.url}/charges?idempotency_key={{idempotency_key}}",
        "records": "data.0",
        "single_object": True,
    }
    tool.save()
    effect = lost(alice, seconds_ago=SETTLED)

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert checks_of(effect)[0].data["listed"] is False
    assert reviews_of(effect) == [("not_found_unproven", True)]


def test_a_proven_absence_on_the_last_attempt_fails_the_effect_as_never_sent(alice, lookup_only):
    effect = on_last_attempt(alice)
    lease_ran_out(effect["id"], SETTLED)

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "failed"
    assert last_transition(effect).reason == "never_sent"


def test_a_key_honouring_not_found_past_the_key_ttl_proves_nothing(alice, provider):
    effect = lost(alice, seconds_ago=SETTLED)
    time_passes(effect["id"], timedelta(hours=25).total_seconds())  # key_ttl is 24 h

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("not_found_unproven", True)]


def test_a_found_charge_settles_the_effect_and_closes_the_item_that_asked(alice, lookup_only):
    effect = alice.intent(claim=True)
    charge_at(lookup_only, effect)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    ReviewItem.objects.create(
        effect_id=effect["id"], reason="reconciliation_inconclusive", due_at=database_now()
    )

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "confirmed"
    assert reviews_of(effect) == [("reconciliation_inconclusive", False)]
    closed = [e for e in events_of(effect["id"]) if e.kind == "review_closed"]
    assert [(e.actor, e.data["item_reason"]) for e in closed] == [
        ("system:reconciler", "reconciliation_inconclusive")
    ]


# --- Two records under one reference ---------------------------------------------------------


def test_two_charges_under_one_reference_open_a_duplicate_and_halt_the_tool(alice, lookup_only):
    lookup_only.set_faults(reference_only=True)
    effect = lost(alice, seconds_ago=SETTLED)
    charge_at(lookup_only, effect)
    charge_at(lookup_only, effect)

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    item = ReviewItem.objects.get(effect_id=effect["id"])
    assert (item.reason, item.severity) == ("duplicate", 3)
    assert Halt.objects.filter(scope="tool", value="charge_card", resumed_at=None).exists()


# --- The tail check --------------------------------------------------------------------------


def _retried_and_confirmed(alice, provider) -> dict:
    """Lost, proven absent, then sent again by the agent and confirmed."""
    effect = lost(alice, seconds_ago=SETTLED)
    assert process_one(effect["id"]) is True
    assert stored(effect).status == "planned"
    retry = alice.claim(effect["id"])
    charge = charge_at(provider, effect).json()
    alice.outcome(effect["id"], retry["lease_token"], "confirmed", provider_ref=charge["id"])
    return effect


def test_the_tail_check_waits_until_the_retry_has_resolved_and_settled(alice, lookup_only):
    effect = lost(alice, seconds_ago=SETTLED)
    assert process_one(effect["id"]) is True
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET tail_check_at = now() - interval '1 second' WHERE id = %s",
            [effect["id"]],
        )

    assert run_due() == {"waiting": 1}

    after = stored(effect)
    assert after.status == "planned"
    assert after.tail_check_at > database_now()
    assert not [c for c in checks_of(effect) if c.data.get("tail_check")]


def test_the_tail_check_finds_nothing_more_and_stops(alice, lookup_only):
    lookup_only.set_faults(reference_only=True)
    effect = _retried_and_confirmed(alice, lookup_only)
    tail_due(effect)

    assert run_due() == {"clean": 1}

    assert stored(effect).tail_check_at is None
    assert reviews_of(effect) == []
    assert run_due() == {}


def test_a_first_request_that_lands_late_is_caught_by_the_tail_check(alice, lookup_only):
    lookup_only.set_faults(reference_only=True)
    effect = _retried_and_confirmed(alice, lookup_only)
    # The first request, held up somewhere past every bound, lands after the retry.
    charge_at(lookup_only, effect)
    tail_due(effect)

    assert run_due() == {"duplicate": 1}

    after = stored(effect)
    assert after.status == "confirmed"
    item = ReviewItem.objects.get(effect_id=effect["id"], resolved_at=None)
    assert (item.reason, item.severity) == ("duplicate", 3)
    assert Halt.objects.filter(scope="tool", value="charge_card", resumed_at=None).exists()
    assert after.tail_check_at is None


# --- Late evidence for a settled or retried effect -------------------------------------------


def test_a_late_outcome_naming_another_ref_opens_a_duplicate(alice, lookup_only):
    effect = alice.intent(claim=True)
    expired = effect["lease_token"]
    lease_ran_out(effect["id"], SETTLED)
    assert process_one(effect["id"]) is True  # proven absent: planned
    retry = alice.claim(effect["id"])
    alice.outcome(effect["id"], retry["lease_token"], "confirmed", provider_ref="ch_second")

    late = alice.post(
        f"/effects/{effect['id']}/outcome",
        {"lease_token": expired, "status": "confirmed", "provider_ref": "ch_first"},
    )

    assert_error(late, 409, "stale_lease")
    item = ReviewItem.objects.get(effect_id=effect["id"], resolved_at=None)
    assert (item.reason, item.severity) == ("duplicate", 3)
    assert [e.kind for e in events_of(effect["id"])][-1] == "late_outcome"


def test_an_effect_with_an_open_duplicate_cannot_be_claimed(alice, lookup_only):
    effect = lost(alice, seconds_ago=SETTLED)
    assert process_one(effect["id"]) is True
    ReviewItem.objects.create(effect_id=effect["id"], reason="duplicate", due_at=database_now())

    refused = alice.post(f"/effects/{effect['id']}/claim", {"owner": "w1"})

    body = assert_error(refused, 409, "invalid_transition")
    assert "duplicate" in body["detail"]
    assert stored(effect).status == "planned"


# --- Review items: raised, never lowered -----------------------------------------------------


def test_an_item_opened_again_for_a_graver_reason_is_raised_and_never_lowered(alice):
    from ledger.models import Reason
    from ledger.rules.reviewqueue import open_review

    effect = alice.intent(tool="send_email", request={"to": "x@example.com"})
    assert open_review(effect["id"], Reason.INCONCLUSIVE) is True
    assert open_review(effect["id"], Reason.DUPLICATE) is True
    assert open_review(effect["id"], Reason.STALE) is False

    item = ReviewItem.objects.get(effect_id=effect["id"])
    assert (item.reason, item.severity) == ("duplicate", 3)


# --- Leases long enough for the call ---------------------------------------------------------


def test_a_claim_with_a_lease_shorter_than_the_call_timeout_is_refused(alice, lookup_only):
    refused = alice.post(
        "/effects",
        {
            "run_id": "r1",
            "step_id": "s1",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "10.00", "currency": "EUR"},
            "claim": True,
            "owner": "w1",
            "lease_seconds": 10,
        },
    )

    body = assert_error(refused, 422, "validation_error")
    assert body["fields"] == {"lease_seconds": "at least 30"}


def test_a_heartbeat_never_shortens_the_lease_below_the_call_timeout(alice, lookup_only):
    claimed = alice.intent(claim=True)
    path = f"/effects/{claimed['id']}/heartbeat"
    short = alice.post(path, {"lease_token": claimed["lease_token"], "lease_seconds": 5})
    body = assert_error(short, 422, "validation_error")
    assert body["fields"] == {"lease_seconds": "at least 30"}
    unsaid = alice.post(path, {"lease_token": claimed["lease_token"]})
    assert unsaid.status_code == 200, unsaid.content
    assert unsaid.json()["lease_seconds"] >= 30


def test_a_claim_without_a_lease_gets_at_least_the_call_timeout(alice, tools, lookup_only):
    tools["charge_card"].call_timeout = timedelta(seconds=90)
    tools["charge_card"].settle_after = timedelta(minutes=3)
    tools["charge_card"].save()

    claimed = alice.intent(claim=True)

    assert claimed["lease_seconds"] == 90
