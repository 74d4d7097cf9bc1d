"""Calls known by their position in the run and their request (ADR 0018), on the real API and
PostgreSQL:

- `key_includes_request`: the effect key is `run_id:step_id:r<keyed digest>`; the same call at
  the same position is the same effect, another request there is another effect; a business
  key still wins; bad combinations are refused with 422 and nothing written;
- a lost lease gives its attempt back (`ledger/sql/lost_leases.sql`), five times at most;
- a request sent twice in one run under two keys is raised once, with a review item naming the
  earlier effect and an alert (`ledger.containment.repeated`).
"""

from __future__ import annotations

import pytest
from django.db import connection

from ledger.containment.repeated import flag_recent
from ledger.models import Alert, Effect, EffectEvent, Reason, ReviewItem, Severity
from tests.helpers import expire_lease

pytestmark = pytest.mark.django_db

PAY = {"amount": "25.00", "currency": "EUR"}


def by_position(client, step: str = "tools/turn-1", request=None, **body):
    return client.intent("run-7", step, request=request or PAY, key_includes_request=True, **body)


# --- key_includes_request ----------------------------------------------------------------------


def test_the_same_call_at_the_same_position_is_one_effect(alice, tools):
    first = by_position(alice)
    again = by_position(alice, expect=200)
    assert again["id"] == first["id"]
    assert first["effect_key"].startswith("run-7:tools/turn-1:r")
    assert "25" not in first["effect_key"].split(":")[-1]  # a keyed digest, not the values


def test_another_request_at_the_same_position_is_another_effect(alice, tools):
    first = by_position(alice)
    other = by_position(alice, request={"amount": "26.00", "currency": "EUR"})
    assert other["id"] != first["id"]
    assert other["effect_key"] != first["effect_key"]
    assert other["step_id"] == first["step_id"] == "tools/turn-1"


def test_equal_numbers_written_differently_are_one_request(alice, tools):
    first = by_position(alice, request={"amount": 25, "currency": "EUR"})
    again = by_position(alice, request={"amount": 25.0, "currency": "EUR"}, expect=200)
    assert again["id"] == first["id"]


def test_a_business_key_wins_over_the_position(alice, tools):
    tools["charge_card"].key_fields = ["order"]
    tools["charge_card"].save()
    first = by_position(alice, request={**PAY, "order": "o-1"})
    elsewhere = by_position(alice, step="tools/turn-9", request={**PAY, "order": "o-1"}, expect=200)
    assert elsewhere["id"] == first["id"]
    assert first["effect_key"].startswith("key:charge_card:")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"effect_key": "mine"}, "effect_key"),
        ({"key_includes_request": "yes"}, "key_includes_request"),
    ],
)
def test_bad_combinations_are_refused_and_write_nothing(alice, tools, body, field):
    payload = {"key_includes_request": True, **body}
    refused = alice.intent("run-7", "tools/turn-1", request=PAY, expect=422, **payload)
    assert field in str(refused)
    assert Effect.objects.count() == 0


@pytest.mark.parametrize(("step_length", "status"), [(181, 201), (182, 422)])
def test_the_longest_position_still_makes_a_key(alice, tools, step_length, status):
    response = alice.post(
        "/effects",
        {
            "run_id": "r" * 200,
            "step_id": "s" * step_length,
            "tool": "charge_card",
            "target": "acct_42",
            "request": PAY,
            "key_includes_request": True,
        },
    )
    assert response.status_code == status, response.content
    if status == 422:
        assert "step_id" in response.json()["fields"]
        assert Effect.objects.count() == 0
    else:
        assert len(response.json()["effect_key"]) == 400


# --- A lost lease gives its attempt back -------------------------------------------------------


def lose_lease(client, effect_id: str) -> dict:
    claimed = client.claim(effect_id)
    expire_lease(effect_id)
    client.post("/recovery", {"run_id": "run-7"})
    return claimed


def attempt_of(effect_id: str) -> tuple[int, int, str]:
    effect = Effect.objects.get(pk=effect_id)
    return effect.attempt, effect.lost_leases, effect.status


def test_a_lost_lease_gives_its_attempt_back_and_a_report_does_not(alice, tools):
    effect = alice.intent("run-7", "s1", tool="get_balance", request={"account": "a1"})
    claimed = lose_lease(alice, effect["id"])
    assert claimed["attempt"] == 1
    assert attempt_of(effect["id"]) == (0, 1, "planned")
    # An owner's own report, within its lease, keeps the attempt it took.
    again = alice.claim(effect["id"])
    alice.outcome(effect["id"], again["lease_token"], status="unknown", error={"m": "timeout"})
    assert attempt_of(effect["id"])[:2] == (1, 1)


def test_only_five_lost_leases_are_given_back(alice, tools):
    effect = alice.intent("run-7", "s1", tool="get_balance", request={"account": "a1"})
    Effect.objects.filter(pk=effect["id"]).update(max_attempts=10)
    for lost in range(1, 8):
        lose_lease(alice, effect["id"])
        attempt, losses, status = attempt_of(effect["id"])
        assert (losses, status) == (lost, "planned")
        assert attempt == max(0, lost - 5)


# --- A request sent twice in one run -----------------------------------------------------------


def sent(client, step: str, request=None) -> dict:
    effect = client.intent("run-7", step, request=request or PAY)
    claimed = client.claim(effect["id"])
    client.outcome(effect["id"], claimed["lease_token"], provider_ref=f"ch_{step}")
    return effect


def test_a_request_sent_twice_in_one_run_is_raised_once(alice, tools):
    first = sent(alice, "call_a")
    second = sent(alice, "call_b")  # the model re-issued it under a new call id
    sent(alice, "call_c", request={"amount": "3.00", "currency": "EUR"})  # another request

    assert flag_recent() == 1
    assert flag_recent() == 0  # once

    item = ReviewItem.objects.get(resolved_at__isnull=True)
    assert (str(item.effect_id), item.reason) == (second["id"], Reason.REPEATED_REQUEST)
    assert item.severity == Severity.HIGH
    event = EffectEvent.objects.get(effect_id=second["id"], kind="repeated")
    assert event.data["earlier_effect_id"] == first["id"]
    alert = Alert.objects.get(kind="repeated_request")
    assert alert.payload["effect_id"] == second["id"]
    assert alert.payload["earlier_effect_id"] == first["id"]


def test_what_was_not_sent_or_is_another_run_is_not_raised(alice, tools):
    sent(alice, "call_a")
    alice.intent("run-7", "call_b", request=PAY)  # recorded, never claimed
    alice.intent("run-8", "call_c", request=PAY)  # another run
    assert flag_recent() == 0


def test_only_recent_effects_are_looked_at(alice, tools):
    sent(alice, "call_a")
    sent(alice, "call_b")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_effect SET created_at = now() - interval '1 hour'")
    assert flag_recent() == 0
