"""POST /effects/{id}/end-lease: a restarted process ends the live lease of its predecessor,
which it knows is gone, and recovery takes the effect up at once instead of when the lease
would have run out. Only the lease changes; the lost claim's attempt comes back as after an
expiry (ledger/sql/lost_leases.sql), and the old holder's token is fenced off."""

from __future__ import annotations

import pytest

from ledger.effects.recovery import database_now
from ledger.models import Effect
from reconcilers.reconcile import process_one
from tests.factories import charge_at
from tests.helpers import assert_error, events_of, expire_lease

pytestmark = pytest.mark.django_db(transaction=True)

DEAD = "agent-host:4242:4026531836"


def _held(alice, owner: str = DEAD) -> dict:
    return alice.intent(claim=True, claim_id="c1", owner=owner, lease_seconds=600)


def test_the_lease_ends_now_and_recovery_settles_the_effect_at_once(alice, provider):
    """The dead process had charged: its successor learns so now, not in ten minutes."""
    effect = _held(alice)
    charge_at(provider, effect)

    response = alice.post(f"/effects/{effect['id']}/end-lease", {"owner": DEAD})

    assert response.status_code == 200, response.content
    stored = Effect.objects.get(pk=effect["id"])
    assert stored.status == "dispatching"
    assert stored.lease_expires_at <= database_now()
    event = events_of(effect["id"])[-1]
    assert (event.kind, event.actor, event.data["owner"]) == ("lease_ended", "agent:alice", DEAD)
    # The plan no longer waits for the lease: recovery asks the provider now.
    plan = alice.post("/recovery", {"run_id": effect["run_id"]}).json()
    assert [item["action"] for item in plan["effects"]] == ["reconcile"]
    assert process_one(effect["id"]) is True  # the lookup the wake-up asks for
    stored.refresh_from_db()
    assert (stored.status, stored.lost_leases) == ("confirmed", 1)


def test_the_old_holders_token_is_fenced_off(alice):
    effect = _held(alice)
    alice.post(f"/effects/{effect['id']}/end-lease", {"owner": DEAD})

    beat = alice.post(f"/effects/{effect['id']}/heartbeat", {"lease_token": effect["lease_token"]})

    assert_error(beat, 409, "stale_lease")


@pytest.mark.parametrize(
    "case", ["another owner", "an expired lease", "a planned effect", "ended twice"]
)
def test_a_lease_that_is_not_that_owners_live_one_is_refused_and_left_as_it_was(alice, case):
    if case == "a planned effect":
        effect = alice.intent()
    else:
        effect = _held(alice, owner="someone-else" if case == "another owner" else DEAD)
    if case == "an expired lease":
        expire_lease(effect["id"])
    if case == "ended twice":
        alice.post(f"/effects/{effect['id']}/end-lease", {"owner": DEAD})
    before = Effect.objects.get(pk=effect["id"])
    events = len(events_of(effect["id"]))

    response = alice.post(f"/effects/{effect['id']}/end-lease", {"owner": DEAD})

    assert_error(response, 409, "stale_lease")
    after = Effect.objects.get(pk=effect["id"])
    assert (after.status, after.lease_expires_at, after.version) == (
        before.status,
        before.lease_expires_at,
        before.version,
    )
    assert len(events_of(effect["id"])) == events


@pytest.mark.parametrize("body", [{}, {"owner": ""}, {"owner": "x" * 201}, {"owner": 7}])
def test_a_missing_or_bad_owner_is_422_and_changes_nothing(alice, body):
    effect = _held(alice)

    response = alice.post(f"/effects/{effect['id']}/end-lease", body)

    assert response.status_code == 422, response.content
    assert Effect.objects.get(pk=effect["id"]).lease_expires_at > database_now()
