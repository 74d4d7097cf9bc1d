"""Compensations: new effects that undo confirmed ones."""

from __future__ import annotations

from ledger.models import Effect, ReviewItem
from tests.helpers import events_of


def _confirmed_payment(alice, step_id: str = "pay") -> dict:
    effect = alice.intent(step_id=step_id, claim=True)
    return alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")


def test_a_compensation_is_a_new_effect_with_its_own_id_and_key(alice):
    payment = _confirmed_payment(alice)
    response = alice.post(
        f"/effects/{payment['id']}/compensate", {"request": {"charge": "ch_1"}, "reason": "refund"}
    )
    assert response.status_code == 201, response.content
    comp = response.json()
    assert comp["kind"] == "compensation"
    assert comp["parent_id"] == payment["id"]
    assert comp["tool"] == "refund_card"  # charge_card's compensated_by
    assert comp["effect_key"] == "run-1:pay:comp:1"
    assert comp["id"] != payment["id"]
    assert comp["idempotency_key"] != payment["idempotency_key"]
    assert comp["status"] == "planned"


def test_a_repeated_compensation_returns_the_same_effect(alice):
    payment = _confirmed_payment(alice)
    body = {"request": {"charge": "ch_1"}, "compensation_key": "r1"}
    first = alice.post(f"/effects/{payment['id']}/compensate", body)
    again = alice.post(f"/effects/{payment['id']}/compensate", body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]


def test_only_a_confirmed_effect_can_be_compensated(alice):
    effect = alice.intent()
    response = alice.post(f"/effects/{effect['id']}/compensate", {"request": {}})
    assert response.status_code == 409
    assert response.json()["error"] == "invalid_transition"
    assert not Effect.objects.filter(kind="compensation").exists()


def test_a_tool_without_compensated_by_needs_an_explicit_tool(alice):
    effect = alice.intent(tool="send_email", target="a@b.c", claim=True)
    alice.outcome(effect["id"], effect["lease_token"])
    response = alice.post(f"/effects/{effect['id']}/compensate", {"request": {}})
    assert response.status_code == 422
    assert "tool" in response.json()["fields"]


def test_a_confirmed_compensation_marks_the_parent_compensated(alice):
    payment = _confirmed_payment(alice)
    comp = alice.post(f"/effects/{payment['id']}/compensate", {"request": {}}).json()
    token = alice.claim(comp["id"])["lease_token"]
    alice.outcome(comp["id"], token, provider_ref="re_1")
    parent = Effect.objects.get(pk=payment["id"])
    assert parent.status == "compensated"
    (event,) = [e for e in events_of(payment["id"]) if e.to_status == "compensated"]
    assert event.data == {"compensation": comp["id"]}


def test_a_failed_compensation_leaves_the_parent_confirmed_and_opens_a_review(alice):
    payment = _confirmed_payment(alice)
    comp = alice.post(f"/effects/{payment['id']}/compensate", {"request": {}}).json()
    token = alice.claim(comp["id"])["lease_token"]
    alice.outcome(comp["id"], token, "failed", error="refund window closed")
    assert Effect.objects.get(pk=payment["id"]).status == "confirmed"
    item = ReviewItem.objects.get(effect_id=payment["id"])
    assert item.reason == "compensation_failed"


def test_a_downstream_claim_waits_while_its_upstream_is_being_compensated(alice):
    payment = _confirmed_payment(alice)
    alice.post(f"/effects/{payment['id']}/compensate", {"request": {}})
    ship = alice.intent(step_id="ship", depends_on=[payment["id"]])
    refused = alice.claim(ship["id"], expect=409)
    assert refused["error"] == "blocked"
    assert refused["blocked_by"] == [
        {"id": payment["id"], "status": "confirmed", "compensating": True}
    ]


def test_compensation_is_refused_while_a_downstream_effect_is_confirmed(alice):
    payment = _confirmed_payment(alice)
    ship = alice.intent(step_id="ship", depends_on=[payment["id"]], claim=True)
    alice.outcome(ship["id"], ship["lease_token"])
    response = alice.post(f"/effects/{payment['id']}/compensate", {"request": {}})
    assert response.status_code == 409
    assert response.json()["error"] == "has_active_dependents"
    assert response.json()["dependents"] == [{"id": ship["id"], "status": "confirmed"}]
