"""The reconciliation checker, continued: lost responses, providers that ignore keys, effects
awaiting confirmation, and the generic HTTP lookup.

Providers are sandbox subprocesses spoken to over real HTTP; time passes by back-dating rows
against the database clock, never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from django.conf import settings

from reconcilers.reconcile import process_next, process_one
from reconcilers.schedules import queue_expired_leases
from tests.factories import (
    CHARGE,
    SETTLED,
    charge_at,
    checks_of,
    due_now,
    lost,
    reviews_of,
    statuses_of,
    stored,
    time_passes,
)
from tests.helpers import expire_lease

REQUEST = {"amount": "10.00", "currency": "EUR"}


# --- Lost responses and providers that ignore keys -------------------------------------------


def test_a_charge_whose_response_was_dropped_is_confirmed_once_by_lookup(alice, provider):
    effect = alice.intent(claim=True)
    provider.set_faults(drop=True, methods=("POST",))
    with pytest.raises(httpx.TransportError):
        charge_at(provider, effect)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")

    assert process_one(effect["id"]) is True

    [charge] = provider.transactions()
    after = stored(effect)
    assert (after.status, after.provider_ref) == ("confirmed", charge["id"])
    assert charge["idempotency_key"] == effect["idempotency_key"]


def test_a_charge_whose_agent_died_after_the_dropped_response_is_confirmed_once_by_lookup(
    alice, provider
):
    effect = alice.intent(claim=True)
    provider.set_faults(drop=True, methods=("POST",))
    with pytest.raises(httpx.TransportError):
        charge_at(provider, effect)
    expire_lease(effect["id"])
    assert queue_expired_leases() == 1

    assert process_next() is True

    [charge] = provider.transactions()
    after = stored(effect)
    assert (after.status, after.provider_ref) == ("confirmed", charge["id"])
    assert "planned" not in statuses_of(effect)


def test_a_provider_that_ignores_keys_sends_the_effect_to_review_never_to_a_retry(alice, provider):
    effect = alice.intent(claim=True)
    provider.set_faults(ignore_keys=True, drop=True, methods=("POST",))
    with pytest.raises(httpx.TransportError):
        charge_at(provider, effect)
    provider.set_faults(ignore_keys=True)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    time_passes(effect["id"], SETTLED)

    for _ in range(settings.LEDGER_MAX_CHECKS - 1):
        assert process_one(effect["id"]) is True
        due_now(effect["id"])
    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "unknown"
    assert reviews_of(effect) == [("reconciliation_inconclusive", True)]
    assert "planned" not in statuses_of(effect)
    assert {c.reason for c in checks_of(effect)} == {"inconclusive"}
    assert len(provider.transactions()) == 1
    assert process_one(effect["id"]) is False


# --- Awaiting confirmation -------------------------------------------------------------------


def test_a_pending_charge_is_confirmed_by_polling_once_the_provider_settles_it(alice, provider):
    effect = alice.intent(claim=True)
    pending = provider.http.post(
        "/charges",
        json=CHARGE,
        headers={"Idempotency-Key": effect["idempotency_key"], "X-Sandbox-Async": "1"},
    ).json()
    assert pending["status"] == "pending"
    alice.outcome(
        effect["id"], effect["lease_token"], "awaiting_confirmation", provider_ref=pending["id"]
    )
    # The first poll comes soon, not at once.
    assert process_one(effect["id"]) is False
    due_now(effect["id"])

    assert process_one(effect["id"]) is True
    assert stored(effect).status == "awaiting_confirmation"
    assert [c.data["status"] for c in checks_of(effect)] == ["pending"]

    assert provider.wait_for(lambda: provider.transactions()[0]["status"] == "succeeded")
    due_now(effect["id"])
    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert (after.status, after.provider_ref) == ("confirmed", pending["id"])
    assert [c.data["status"] for c in checks_of(effect)] == ["pending", "confirmed"]


def test_without_a_lookup_an_awaiting_effect_goes_to_review_only_after_its_deadline(
    alice,
):
    effect = alice.intent(tool="send_email", request={"to": "x@example.com"}, claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "awaiting_confirmation")
    time_passes(effect["id"], 3599)  # the default confirm_within is an hour

    assert process_one(effect["id"]) is False
    assert stored(effect).status == "awaiting_confirmation"

    time_passes(effect["id"], 2)
    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "unknown"
    assert statuses_of(effect)[-1] == "unknown"
    assert reviews_of(effect) == [("no_lookup", True)]


def test_an_awaiting_effect_the_provider_never_settles_becomes_unknown_after_its_deadline(
    alice, provider
):
    effect = alice.intent(claim=True)
    provider.http.post(
        "/charges",
        json=CHARGE,
        headers={"Idempotency-Key": effect["idempotency_key"], "X-Sandbox-Async": "1"},
    )
    provider.set_faults(fail5xx=503, methods=("GET",))
    alice.outcome(effect["id"], effect["lease_token"], "awaiting_confirmation")
    time_passes(effect["id"], timedelta(minutes=16).total_seconds())  # confirm_within: 15 min

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert after.status == "unknown"
    assert after.checks == 1
    assert "failed" not in statuses_of(effect)


# --- The generic HTTP lookup -----------------------------------------------------------------


@pytest.fixture
def ticket_lookup(tools, provider):
    """create_ticket (lookup only) searched through http_lookup; the sandbox's charge list
    stands in for a ticketing system's search endpoint."""
    tool = tools["create_ticket"]
    tool.reconciler_config = {
        "url": f"{provider.url}/charges?idempotency_key={{idempotency_key}}",
        "records": "data",
        "key": "idempotency_key",
        "status": "status",
        "ref": "id",
        "confirmed": ["succeeded"],
    }
    tool.save()
    return provider


def test_the_http_lookup_confirms_a_record_that_echoes_our_key(alice, ticket_lookup):
    effect = lost(alice, tool="create_ticket", request=REQUEST)
    record = charge_at(ticket_lookup, effect).json()

    assert process_one(effect["id"]) is True

    after = stored(effect)
    assert (after.status, after.provider_ref) == ("confirmed", record["id"])


@pytest.mark.parametrize("fault", ["garbage", "wrong_types", "fail5xx"])
def test_the_http_lookup_treats_a_bad_answer_as_inconclusive(alice, ticket_lookup, fault):
    effect = lost(alice, tool="create_ticket", request=REQUEST)
    charge_at(ticket_lookup, effect)
    ticket_lookup.set_faults(**{fault: True}, methods=("GET",))

    assert process_one(effect["id"]) is True

    assert stored(effect).status == "unknown"
    assert [c.reason for c in checks_of(effect)] == ["inconclusive"]
    assert reviews_of(effect) == []
