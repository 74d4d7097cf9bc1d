"""depends_on: a downstream effect waits until every upstream effect is confirmed."""

from __future__ import annotations

from ledger.models import Effect
from tests.helpers import events_of


def test_a_claim_is_blocked_until_the_upstream_is_confirmed(alice):
    payment = alice.intent(step_id="pay")
    notify = alice.intent(step_id="notify", tool="send_email", depends_on=[payment["id"]])
    assert notify["blocked_by"] == [{"id": payment["id"], "status": "planned"}]

    refused = alice.claim(notify["id"], expect=409)
    assert refused["error"] == "blocked"
    assert refused["blocked_by"] == [{"id": payment["id"], "status": "planned"}]
    assert Effect.objects.get(pk=notify["id"]).status == "planned"

    token = alice.claim(payment["id"])["lease_token"]
    assert alice.claim(notify["id"], expect=409)["blocked_by"][0]["status"] == "dispatching"
    alice.outcome(payment["id"], token)

    claimed = alice.claim(notify["id"])
    assert claimed["status"] == "dispatching"
    assert claimed["blocked_by"] == []
    assert claimed["depends_on"] == [payment["id"]]


def test_intent_with_claim_while_blocked_records_nothing(alice):
    payment = alice.intent(step_id="pay")
    response = alice.post(
        "/effects",
        {
            "run_id": "run-1",
            "step_id": "notify",
            "tool": "send_email",
            "target": "a@b.c",
            "request": {},
            "depends_on": [payment["id"]],
            "claim": True,
        },
    )
    assert response.status_code == 409
    assert response.json()["error"] == "blocked"
    assert not Effect.objects.filter(step_id="notify").exists()


def test_a_failed_upstream_cancels_its_planned_dependents_transitively(alice):
    payment = alice.intent(step_id="pay")
    ship = alice.intent(step_id="ship", depends_on=[payment["id"]])
    notify = alice.intent(step_id="notify", depends_on=[ship["id"]])
    token = alice.claim(payment["id"])["lease_token"]
    alice.outcome(payment["id"], token, "failed", error="card declined")

    for downstream in (ship, notify):
        stored = Effect.objects.get(pk=downstream["id"])
        assert stored.status == "cancelled"
        (event,) = [e for e in events_of(downstream["id"]) if e.to_status == "cancelled"]
        assert event.reason == "upstream_failed"
        assert event.data == {"upstream": payment["id"]}


def test_a_cancelled_upstream_cancels_its_planned_dependents(alice):
    payment = alice.intent(step_id="pay")
    notify = alice.intent(step_id="notify", depends_on=[payment["id"]])
    response = alice.post(f"/effects/{payment['id']}/cancel", {"reason": "user changed mind"})
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert Effect.objects.get(pk=notify["id"]).status == "cancelled"


def test_the_cascade_follows_planned_effects_only(alice):
    from ledger.effects.compensation import compensate

    a = alice.intent(step_id="a")
    alice.outcome(a["id"], alice.claim(a["id"])["lease_token"])
    b = alice.intent(step_id="b", depends_on=[a["id"]])
    alice.claim(b["id"])
    c = alice.intent(step_id="c", depends_on=[b["id"]])
    d = alice.intent(step_id="d", depends_on=[a["id"]])
    # An operator forces a compensation of a although b is in flight.
    comp, _ = compensate(
        alice.agent,
        Effect.objects.get(pk=a["id"]),
        tool=None,
        request={},
        reason="undo",
        compensation_key=None,
        actor="operator:olga",
        force=True,
    )
    alice.outcome(str(comp.id), alice.claim(str(comp.id))["lease_token"])

    assert Effect.objects.get(pk=a["id"]).status == "compensated"
    assert Effect.objects.get(pk=d["id"]).status == "cancelled"
    assert Effect.objects.get(pk=b["id"]).status == "dispatching"
    assert Effect.objects.get(pk=c["id"]).status == "planned"


def test_interlocks_work_across_agents_and_show_only_ids_and_statuses(alice, bob):
    upstream = alice.intent(step_id="pay")
    downstream = bob.intent(run_id="bob-run", step_id="ship", depends_on=[upstream["id"]])
    assert downstream["blocked_by"] == [{"id": upstream["id"], "status": "planned"}]
    assert bob.claim(downstream["id"], expect=409)["error"] == "blocked"


def test_cancelling_an_effect_that_is_not_planned_is_refused(alice):
    effect = alice.intent(claim=True)
    response = alice.post(f"/effects/{effect['id']}/cancel", {"reason": "too late"})
    assert response.status_code == 409
    assert response.json()["error"] == "invalid_transition"


def test_cancelling_twice_returns_the_cancelled_effect(alice):
    effect = alice.intent()
    alice.post(f"/effects/{effect['id']}/cancel", {"reason": "no"})
    again = alice.post(f"/effects/{effect['id']}/cancel", {"reason": "no"})
    assert again.status_code == 200
    assert len([e for e in events_of(effect["id"]) if e.to_status == "cancelled"]) == 1
