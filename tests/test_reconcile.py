"""The reconciliation checker: what it does with an effect whose outcome nobody reported.

Providers are sandbox subprocesses spoken to over real HTTP; time passes by back-dating rows
against the database clock, never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings

from ledger.effects.recovery import database_now
from reconcilers.reconcile import process_next, process_one, take
from tests.factories import (
    CHARGE,
    SETTLED,
    charge_at,
    checks_of,
    due_now,
    lease_ran_out,
    lost,
    reviews_of,
    statuses_of,
    stored,
    time_passes,
)
from tests.helpers import events_of, expire_lease

REQUEST = {"amount": "10.00", "currency": "EUR"}


# --- Helpers ---------------------------------------------------------------------------------


STALE_VERSION = (
    "reconcile._found/_not_found call _to_unknown() but drop the moved effect it returns, then "
    "_reschedule(effect, None) matches on the pre-transition version and updates 0 rows: a "
    "lost (dispatching) effect keeps next_check_at = now + LEDGER_CHECK_LEASE and is asked "
    "again after the review item opened, writing a second reconciliation event"
)


def checks_stop(effect: dict) -> None:
    """Past the check lease, the effect is still not due: nobody asks the provider again."""
    time_passes(effect["id"], settings.LEDGER_CHECK_LEASE + 1)
    assert process_one(effect["id"]) is False
    assert len(checks_of(effect)) == 1


def on_last_attempt(alice, step_id: str = "step-1", **intent: Any) -> dict:
    """An effect claimed for the last of its 3 attempts (the first two were not sent)."""
    effect = alice.intent(step_id=step_id, **intent)
    for _ in range(2):
        token = alice.claim(effect["id"])["lease_token"]
        alice.outcome(effect["id"], token, "not_sent")
    claimed = alice.claim(effect["id"])
    assert claimed["attempt"] == claimed["max_attempts"] == 3
    return claimed


# --- Tools without a lookup: the capability table in ledger.effects.recovery
# -------------------------


def test_a_lost_read_only_effect_goes_back_to_planned_for_a_free_retry(alice):
    effect = lost(alice, tool="get_balance", request={})

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "planned"
    assert after.next_check_at is None
    assert reviews_of(effect) == []
    assert alice.claim(effect["id"])["attempt"] == 1  # the lost lease gave its attempt back


def test_a_lost_key_honouring_effect_without_lookup_goes_back_to_planned_within_the_key_ttl(
    alice, tools
):
    tools["refund_card"].has_lookup = False
    tools["refund_card"].save()
    effect = lost(alice, tool="refund_card", request={"charge": "ch_1"})

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "planned"
    assert reviews_of(effect) == []
    # The retry goes out under the same idempotency key, so the provider cannot duplicate it.
    assert alice.claim(effect["id"])["idempotency_key"] == effect["idempotency_key"]


def test_a_lost_key_honouring_effect_past_the_key_ttl_becomes_unknown_and_goes_to_review(
    alice, tools
):
    tools["refund_card"].has_lookup = False
    tools["refund_card"].save()
    effect = lost(alice, tool="refund_card", request={"charge": "ch_1"})
    time_passes(effect["id"], timedelta(hours=25).total_seconds())  # key_ttl is 24 h

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("no_lookup", True)]
    assert "planned" not in statuses_of(effect)


@pytest.mark.parametrize("tool", ["send_email", "launch_rocket"], ids=["unsafe", "undeclared"])
def test_a_lost_effect_of_a_tool_that_can_do_nothing_becomes_unknown_and_goes_to_review(
    alice, tool
):
    effect = lost(alice, tool=tool, request={"to": "x@example.com"})

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "unknown"
    assert after.next_check_at is None
    assert reviews_of(effect) == [("no_lookup", True)]
    # Nothing more for the checker to do: a person decides.
    assert process_one(effect["id"]) is False


def test_an_unknown_outcome_of_an_unsafe_tool_goes_to_review_at_once(alice):
    effect = alice.intent(tool="send_email", request={"to": "x@example.com"}, claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("no_lookup", True)]


def test_a_lost_key_honouring_effect_on_its_last_attempt_goes_to_review_not_back_to_planned(
    alice, tools
):
    tools["refund_card"].has_lookup = False
    tools["refund_card"].save()
    effect = on_last_attempt(alice, tool="refund_card", request={"charge": "ch_1"})
    lease_ran_out(effect["id"])

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("attempts_exhausted", True)]


# --- When an effect is due -------------------------------------------------------------------


def test_the_checker_leaves_a_dispatching_effect_alone_while_its_lease_is_live(alice, provider):
    effect = alice.intent(claim=True)
    due_now(effect["id"])

    assert process_one(effect["id"]) is False
    assert process_next() is False

    assert stored(effect).status == "dispatching"
    assert checks_of(effect) == []


def test_an_expired_lease_is_not_checked_until_the_sweep_queues_it(alice, provider):
    effect = alice.intent(claim=True)
    expire_lease(effect["id"])

    assert process_one(effect["id"]) is False
    assert stored(effect).status == "dispatching"


def test_an_effect_being_checked_is_not_taken_by_a_second_checker(alice, provider):
    effect = lost(alice)
    assert take([effect["id"]])  # a first checker took it, then died

    assert process_one(effect["id"]) is False
    assert process_next() is False

    # A checker that dies only delays the effect: after the check lease it is due again.
    time_passes(effect["id"], settings.LEDGER_CHECK_LEASE + 1)
    charge_at(provider, effect)
    assert process_one(effect["id"]) is True
    assert stored(effect).status == "confirmed"
    assert len(checks_of(effect)) == 1


# --- Tools with a lookup: the answer table in reconcilers.reconcile ---------------------------


def test_a_charge_found_at_the_provider_confirms_the_effect_with_its_reference(alice, provider):
    effect = lost(alice)
    charge = charge_at(provider, effect).json()

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "confirmed"
    assert after.provider_ref == charge["id"]
    assert after.resolved_at is not None
    assert after.next_check_at is None
    [check] = checks_of(effect)
    assert check.reason == "found"
    assert check.data["provider_ref"] == charge["id"]
    assert check.data["status"] == "confirmed"
    assert statuses_of(effect)[-1] == "confirmed"
    assert alice.get(f"/effects/{effect['id']}").json()["provider_ref"] == charge["id"]


def test_an_unknown_effect_found_at_the_provider_is_confirmed(alice, provider):
    effect = alice.intent(claim=True)
    charge = charge_at(provider, effect).json()
    alice.outcome(effect["id"], effect["lease_token"], "unknown")

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert (after.status, after.provider_ref) == ("confirmed", charge["id"])
    assert statuses_of(effect)[-2:] == ["unknown", "confirmed"]


def test_a_record_the_provider_reports_as_failed_fails_the_effect(alice, tools, provider):
    # The sandbox never declines a charge; this provider's vocabulary calls a settled charge
    # "failed", which is all the adapter needs to see.
    tool = tools["charge_card"]
    tool.reconciler = "http_lookup"
    tool.reconciler_config = {
        "url": f"{provider.url}/charges?idempotency_key={{idempotency_key}}",
        "records": "data",
        "key": "idempotency_key",
        "status": "status",
        "ref": "id",
        "confirmed": [],
        "failed": ["succeeded"],
    }
    tool.save()
    effect = lost(alice)
    charge = charge_at(provider, effect).json()

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert (after.status, after.provider_ref) == ("failed", charge["id"])
    assert [c.data["status"] for c in checks_of(effect)] == ["failed"]


def test_a_pending_charge_found_for_a_lost_effect_moves_it_to_awaiting_confirmation(
    alice, provider
):
    effect = lost(alice)
    pending = provider.http.post(
        "/charges",
        json=CHARGE,
        headers={"Idempotency-Key": effect["idempotency_key"], "X-Sandbox-Async": "1"},
    ).json()
    assert pending["status"] == "pending"
    now = database_now()

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "awaiting_confirmation"
    assert after.provider_ref == pending["id"]
    # charge_card's confirm_within is 15 minutes; the provider is polled well before that.
    assert after.confirm_deadline == now + timedelta(minutes=15)
    assert now < after.next_check_at <= now + timedelta(seconds=settings.LEDGER_BACKOFF_BASE)
    assert [c.data["status"] for c in checks_of(effect)] == ["pending"]


@pytest.mark.parametrize(
    ("field", "charged"),
    [
        ("amount", {"amount": "12.00"}),
        ("currency", {"currency": "USD"}),
        ("target", {"account": "acct_99"}),
    ],
)
def test_a_charge_that_differs_from_the_request_is_never_confirmed_and_goes_to_review(
    alice, provider, field, charged
):
    effect = alice.intent(claim=True)
    charge_at(provider, effect, **charged)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "unknown"
    assert after.provider_ref == ""
    assert reviews_of(effect) == [("provider_mismatch", True)]
    [check] = checks_of(effect)
    assert (check.reason, check.data["mismatches"]) == ("found", [field])
    checks_stop(effect)


def test_a_mismatch_found_for_a_lost_effect_goes_to_review_and_stops_the_checks(alice, provider):
    effect = lost(alice)
    charge_at(provider, effect, amount="12.00")

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("provider_mismatch", True)]
    checks_stop(effect)


def test_a_mismatch_keeps_the_providers_record_beside_ours(alice, provider):
    effect = lost(alice)
    charge_at(provider, effect, amount="12.00")

    assert process_one(effect["id"]) is True

    [check] = checks_of(effect)
    assert check.data["mismatches"] == ["amount"]
    # What the provider holds, to be shown against the request: its amount above all.
    assert (check.data["record"]["amount"], check.data["record"]["currency"]) == ("12.00", "EUR")
    assert check.data["record"]["id"] == check.data["provider_ref"]


def test_not_found_before_settle_after_is_asked_again_later_and_the_effect_is_not_retried(
    alice, provider
):
    effect = lost(alice, seconds_ago=30)

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "dispatching"
    assert "planned" not in statuses_of(effect)
    # Asked again once a slow request could no longer land: settle_after after the lease ran out.
    assert after.next_check_at == database_now() - timedelta(seconds=30) + timedelta(minutes=2)
    assert [c.reason for c in checks_of(effect)] == ["not_found"]
    assert process_one(effect["id"]) is False


def test_not_found_after_settle_after_returns_a_key_honouring_effect_to_planned(alice, provider):
    effect = lost(alice, seconds_ago=SETTLED)

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "planned"
    assert after.next_check_at is None
    assert reviews_of(effect) == []
    assert [c.reason for c in checks_of(effect)] == ["not_found"]
    retry = alice.claim(effect["id"])
    # The lost lease gave its attempt back; the key is the same.
    assert (retry["attempt"], retry["idempotency_key"]) == (1, effect["idempotency_key"])


def test_not_found_after_settle_after_on_the_last_attempt_fails_the_effect_as_never_sent(
    alice, provider
):
    effect = on_last_attempt(alice)
    lease_ran_out(effect["id"], SETTLED)

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "failed"
    last = [e for e in events_of(effect["id"]) if e.kind == "transition"][-1]
    assert (last.from_status, last.to_status, last.reason) == (
        "dispatching",
        "failed",
        "never_sent",
    )


def test_not_found_long_after_an_unknown_outcome_returns_a_key_honouring_effect_to_planned(
    alice, provider
):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    time_passes(effect["id"], SETTLED)

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "planned"


def test_not_found_after_an_inconclusive_check_returns_a_long_lost_effect_to_planned(
    alice, provider
):
    effect = lost(alice, seconds_ago=SETTLED)
    provider.set_faults(fail5xx=503)
    assert process_one(effect["id"]) is True
    assert stored(effect).status == "unknown"
    provider.clear_faults()
    due_now(effect["id"])

    assert process_one(effect["id"]) is True

    assert [c.reason for c in checks_of(effect)] == ["inconclusive", "not_found"]
    assert stored(effect).status == "planned"


def test_not_found_for_a_lookup_only_tool_is_unproven_and_goes_to_review(alice, tools, provider):
    # A provider that ignores keys may hold the charge under another name.
    tools["charge_card"].honours_key = False
    tools["charge_card"].save()
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    time_passes(effect["id"], SETTLED)

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "unknown"
    assert reviews_of(effect) == [("not_found_unproven", True)]
    checks_stop(effect)


def test_not_found_for_a_lost_effect_of_a_lookup_only_tool_goes_to_review_and_stops_the_checks(
    alice, tools, provider
):
    tools["charge_card"].honours_key = False
    tools["charge_card"].save()
    effect = lost(alice, seconds_ago=SETTLED)

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert reviews_of(effect) == [("not_found_unproven", True)]
    checks_stop(effect)


def test_an_inconclusive_answer_leaves_the_effect_unknown_and_backs_off_exponentially(
    alice, provider
):
    effect = lost(alice, seconds_ago=SETTLED)
    provider.set_faults(fail5xx=503)
    base = settings.LEDGER_BACKOFF_BASE
    now = database_now()

    assert process_one(effect["id"]) is True
    first = stored(effect)
    assert (first.status, first.checks) == ("unknown", 1)
    assert now + timedelta(seconds=base) <= first.next_check_at <= now + timedelta(seconds=2 * base)

    due_now(effect["id"])
    assert process_one(effect["id"]) is True
    second = stored(effect)
    assert second.checks == 2
    assert (
        now + timedelta(seconds=2 * base)
        <= second.next_check_at
        <= now + timedelta(seconds=4 * base)
    )
    assert [c.reason for c in checks_of(effect)] == ["inconclusive", "inconclusive"]
    assert checks_of(effect)[0].data["detail"] == "provider answered 503"
    assert reviews_of(effect) == []


def test_after_the_last_inconclusive_answer_a_person_is_asked_and_checks_stop(alice, provider):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    provider.set_faults(fail5xx=503)

    for _ in range(settings.LEDGER_MAX_CHECKS - 1):
        assert process_one(effect["id"]) is True
        assert reviews_of(effect) == []
        due_now(effect["id"])
    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert (after.status, after.checks) == ("unknown", settings.LEDGER_MAX_CHECKS)
    assert after.next_check_at is None
    assert reviews_of(effect) == [("reconciliation_inconclusive", True)]
    assert len(checks_of(effect)) == settings.LEDGER_MAX_CHECKS
    assert process_one(effect["id"]) is False


# --- Bad provider answers --------------------------------------------------------------------

BAD_ANSWERS = ["garbage", "wrong_types", "fail5xx", "killed", "hang"]


def _answer_badly(provider, tools, how: str) -> None:
    if how == "killed":
        provider.kill()
    elif how == "hang":
        tool = tools["charge_card"]
        tool.reconciler_config = {"base_url": provider.url, "timeout": 0.5}
        tool.save()
        provider.set_faults(hang=2, methods=("GET",))
    else:
        provider.set_faults(**{how: True}, methods=("GET",))


@pytest.mark.parametrize("how", BAD_ANSWERS)
def test_a_bad_answer_about_a_charge_that_exists_leaves_the_effect_unknown(
    alice, tools, provider, how
):
    effect = lost(alice, seconds_ago=SETTLED)
    charge_at(provider, effect)
    _answer_badly(provider, tools, how)

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "unknown"
    assert after.checks == 1
    assert after.next_check_at > database_now()
    assert [c.reason for c in checks_of(effect)] == ["inconclusive"]


@pytest.mark.parametrize(
    "how",
    [
        "garbage",
        "wrong_types",
        "fail5xx",
        "killed",
        "hang",
    ],
)
def test_a_bad_answer_never_fails_an_effect_on_its_last_attempt(alice, tools, provider, how):
    effect = on_last_attempt(alice)
    lease_ran_out(effect["id"], SETTLED)
    _answer_badly(provider, tools, how)

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert "failed" not in statuses_of(effect)
