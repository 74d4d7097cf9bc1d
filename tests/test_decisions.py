"""Operator decisions through the effect page: each one its own audited effect, in one
transaction with the target's move and the review item's resolution."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from ledger.models import Effect, EffectDependency, EffectEvent, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reconcilers.execution import execute_one
from reviews.decisions.decide import AlreadyDecided, Ask, decide
from tests.factories import signed_in
from tests.helpers import events_of


def post_decision(client: Client, effect: Effect, action: str, **fields: Any):
    body = {"version": effect.version, "reason": "checked the provider", "confirm": "on"}
    body.update(fields)
    return client.post(f"/effects/{effect.id}/decide/{action}", body)


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind="decision"))


@pytest.fixture
def unknown(make_effect) -> Effect:
    """An unknown charge waiting in the review queue."""
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.INCONCLUSIVE)
    return effect


def test_confirming_records_a_decision_effect_moves_the_target_and_resolves_the_item(olga, unknown):
    response = post_decision(
        signed_in(olga), unknown, "confirm", provider_ref="ch_9", evidence="dashboard shows ch_9"
    )
    assert response.status_code == 302

    unknown.refresh_from_db()
    assert (unknown.status, unknown.provider_ref) == ("confirmed", "ch_9")
    [decision] = decisions_on(unknown)
    assert (decision.kind, decision.status, decision.agent_id) == (
        "decision",
        "confirmed",
        unknown.agent_id,
    )
    assert decision.id != unknown.id and decision.idempotency_key != unknown.idempotency_key
    assert decision.provenance["actor"] == "operator:olga"
    assert decision.provenance["reason"] == "checked the provider"
    assert decision.provenance["before"]["status"] == "unknown"
    assert decision.provenance["after"]["status"] == "confirmed"
    item = ReviewItem.objects.get(effect=unknown)
    assert item.resolved_at is not None
    assert (item.resolved_by, item.decision_id) == (olga, decision.id)
    moved = events_of(unknown.id)[-1]
    assert (moved.actor, moved.from_status, moved.to_status) == (
        "operator:olga",
        "unknown",
        "confirmed",
    )
    assert moved.data["decision"] == str(decision.id)
    [recorded] = events_of(decision.id)
    assert (recorded.kind, recorded.actor, recorded.to_status) == (
        "decision",
        "operator:olga",
        "confirmed",
    )


@pytest.mark.parametrize(
    "missing",
    [
        {"reason": ""},
        {"provider_ref": ""},
        {"evidence": ""},
    ],
)
def test_an_incomplete_decision_is_refused_and_writes_nothing(olga, unknown, missing):
    fields = {"provider_ref": "ch_9", "evidence": "seen", **missing}
    response = post_decision(signed_in(olga), unknown, "confirm", **fields)
    assert response.status_code == 422
    unknown.refresh_from_db()
    assert unknown.status == "unknown"
    assert decisions_on(unknown) == []
    assert ReviewItem.objects.get(effect=unknown).resolved_at is None


def test_an_unconfirmed_decision_asks_once_more_and_records_nothing_until_confirmed(olga, unknown):
    client = signed_in(olga)
    fields = {"provider_ref": "ch_9", "evidence": "seen", "confirm": ""}
    asked = post_decision(client, unknown, "confirm", **fields)
    assert asked.status_code == 200
    page = asked.content.decode()
    assert 'id="confirm-step"' in page
    assert f"Confirm {unknown.effect_key} as done by the provider (ref ch_9)?" in page
    unknown.refresh_from_db()
    assert unknown.status == "unknown" and decisions_on(unknown) == []

    confirmed = post_decision(client, unknown, "confirm", **{**fields, "confirm": "on"})
    assert confirmed.status_code == 302
    unknown.refresh_from_db()
    assert unknown.status == "confirmed"


def test_an_auditor_cannot_decide_even_with_a_forged_post(audrey, unknown):
    response = post_decision(
        signed_in(audrey), unknown, "confirm", provider_ref="ch_9", evidence="forged"
    )
    assert response.status_code == 403
    unknown.refresh_from_db()
    assert unknown.status == "unknown" and decisions_on(unknown) == []


def test_a_decision_without_a_csrf_token_is_refused(olga, unknown):
    client = Client(enforce_csrf_checks=True)
    client.force_login(olga)
    response = post_decision(client, unknown, "fail", evidence="declined")
    assert response.status_code == 403
    unknown.refresh_from_db()
    assert unknown.status == "unknown"


def test_signed_out_visitors_are_sent_to_the_login_page(unknown):
    response = Client().get(f"/effects/{unknown.id}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_a_user_without_a_role_sees_no_page(nemo, unknown):
    client = signed_in(nemo)
    for path in ("/", "/queue/", f"/effects/{unknown.id}/"):
        assert client.get(path).status_code == 403, path


def test_a_decision_on_a_stale_view_is_refused_and_the_winner_named(olga, otto, unknown):
    seen = unknown.version
    post_decision(signed_in(olga), unknown, "fail", evidence="declined at the provider")
    response = post_decision(
        signed_in(otto), unknown, "confirm", version=seen, provider_ref="ch_1", evidence="x"
    )
    assert response.status_code == 409
    assert "Already decided by olga" in response.content.decode()
    unknown.refresh_from_db()
    assert unknown.status == "failed"
    assert len(decisions_on(unknown)) == 1


@pytest.mark.django_db(transaction=True)
def test_two_operators_deciding_at_once_record_exactly_one_decision(olga, otto, unknown):
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def act(user, ask: Ask) -> None:
        barrier.wait()
        try:
            results[user.username] = decide(unknown.id, ask, user=user)
        except AlreadyDecided as exc:
            results[user.username] = exc
        finally:
            connection.close()

    asks = {
        "olga": Ask("confirm", "seen", unknown.version, provider_ref="ch_1", evidence="a"),
        "otto": Ask("fail", "declined", unknown.version, evidence="b"),
    }
    threads = [
        threading.Thread(target=act, args=(user, asks[user.username])) for user in (olga, otto)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    lost = [r for r in results.values() if isinstance(r, AlreadyDecided)]
    assert len(lost) == 1, results
    assert len(decisions_on(unknown)) == 1
    unknown.refresh_from_db()
    assert unknown.status in ("confirmed", "failed")
    item = ReviewItem.objects.get(effect=unknown)
    assert item.resolved_by in (olga, otto)
    assert lost[0].extra["decided_by"] == item.resolved_by.username


def test_a_retry_goes_back_to_planned_under_the_same_key(olga, unknown):
    key = unknown.idempotency_key
    response = post_decision(signed_in(olga), unknown, "retry")
    assert response.status_code == 302
    unknown.refresh_from_db()
    assert (unknown.status, unknown.idempotency_key, unknown.attempt) == ("planned", key, 1)
    [decision] = decisions_on(unknown)
    assert decision.provenance["ground"] == "provider_honours_key"


def test_a_retry_that_could_duplicate_needs_the_operators_check(olga, otto, make_effect):
    email = make_effect("unknown", tool="send_email", attempt=1)
    client = signed_in(olga)
    refused = post_decision(client, email, "retry")
    assert refused.status_code == 409
    assert "could do this a second time" in refused.content.decode()
    email.refresh_from_db()
    assert email.status == "unknown"

    # On one operator's word it is only a proposal (four-eyes, tests/test_approvals.py) ...
    proposed = post_decision(
        client, email, "retry", verified_absent="on", evidence="mail log shows no delivery"
    )
    assert proposed.status_code == 302
    email.refresh_from_db()
    assert email.status == "unknown"
    # ... until a second operator confirms it.
    assert post_decision(signed_in(otto), email, "approve").status_code == 302
    email.refresh_from_db()
    assert email.status == "planned"
    [approval] = [d for d in decisions_on(email) if d.provenance["action"] == "approve"]
    assert approval.provenance["ground"] == "operator_verified_absent"


def test_a_retry_beyond_the_attempt_cap_is_refused(olga, make_effect):
    spent = make_effect("unknown", attempt=3)
    response = post_decision(signed_in(olga), spent, "retry")
    assert response.status_code == 409
    spent.refresh_from_db()
    assert spent.status == "unknown" and decisions_on(spent) == []


def test_marking_failed_cancels_the_planned_effects_waiting_on_it(olga, unknown, make_effect):
    downstream = make_effect("planned")
    EffectDependency.objects.create(downstream=downstream, upstream=unknown)
    post_decision(signed_in(olga), unknown, "fail", evidence="provider says declined")
    unknown.refresh_from_db()
    downstream.refresh_from_db()
    assert (unknown.status, downstream.status) == ("failed", "cancelled")


def test_cancelling_a_planned_effect_records_who_and_why(olga, make_effect):
    planned = make_effect("planned")
    response = post_decision(signed_in(olga), planned, "cancel", reason="customer withdrew")
    assert response.status_code == 302
    planned.refresh_from_db()
    assert planned.status == "cancelled"
    last = events_of(planned.id)[-1]
    assert (last.actor, last.reason) == ("operator:olga", "customer withdrew")


def test_a_decision_cannot_move_an_effect_the_state_machine_forbids(olga, make_effect):
    confirmed = make_effect("confirmed", provider_ref="ch_1")
    response = post_decision(signed_in(olga), confirmed, "cancel")
    assert response.status_code == 409
    confirmed.refresh_from_db()
    assert confirmed.status == "confirmed" and decisions_on(confirmed) == []


def test_compensating_by_hand_is_queued_for_a_person_and_confirmed_when_done(olga, make_effect):
    sent = make_effect("confirmed", tool="send_email", provider_ref="msg_1")
    client = signed_in(olga)
    response = post_decision(
        client,
        sent,
        "compensate",
        compensation_tool="send_email",
        compensation_request='{"body": "Please ignore our last message."}',
    )
    assert response.status_code == 302, response.content
    [compensation] = Effect.objects.filter(parent=sent, kind="compensation")
    assert compensation.id != sent.id
    assert compensation.idempotency_key != sent.idempotency_key
    assert compensation.status == "planned"
    item = ReviewItem.objects.get(effect=compensation, resolved_at__isnull=True)
    assert item.reason == Reason.MANUAL_EXECUTION
    assert decisions_on(sent)[0].provenance["compensation"] == str(compensation.id)

    done = post_decision(
        client, compensation, "confirm", provider_ref="msg_2", evidence="sent the correction"
    )
    assert done.status_code == 302
    compensation.refresh_from_db()
    sent.refresh_from_db()
    assert (compensation.status, sent.status) == ("confirmed", "compensated")


def test_compensating_with_active_dependents_needs_force(olga, make_effect):
    charge = make_effect("confirmed", provider_ref="ch_1")
    downstream = make_effect("confirmed", tool="send_email")
    EffectDependency.objects.create(downstream=downstream, upstream=charge)
    client = signed_in(olga)
    refused = post_decision(client, charge, "compensate", compensation_request='{"charge": "ch_1"}')
    assert refused.status_code == 409
    assert not Effect.objects.filter(parent=charge).exists()
    forced = post_decision(
        client, charge, "compensate", compensation_request='{"charge": "ch_1"}', force="on"
    )
    assert forced.status_code == 302
    assert Effect.objects.filter(parent=charge, kind="compensation").count() == 1


def test_a_refund_an_operator_asks_for_is_sent_through_the_adapter(
    olga, alice, payments_provider, tools
):
    for name in ("charge_card", "refund_card"):
        tools[name].reconciler_config = {"base_url": payments_provider.url}
        tools[name].save()
    intent = alice.intent(step_id="pay", claim=True, request={"amount": "12.50", "currency": "EUR"})
    charge = payments_provider.http.post(
        "/charges",
        json={"amount": "12.50", "currency": "EUR", "account": intent["target"]},
        headers={"Idempotency-Key": intent["idempotency_key"]},
    ).json()
    alice.outcome(intent["id"], intent["lease_token"], provider_ref=charge["id"])
    paid = Effect.objects.get(pk=intent["id"])

    response = post_decision(
        signed_in(olga),
        paid,
        "compensate",
        compensation_request=f'{{"charge": "{charge["id"]}", "amount": "12.50"}}',
    )
    assert response.status_code == 302, response.content
    compensation = Effect.objects.get(parent=paid, kind="compensation")
    assert not ReviewItem.objects.filter(effect=compensation).exists()

    assert execute_one(compensation.id) is True  # what the rq job does after commit
    compensation.refresh_from_db()
    paid.refresh_from_db()
    assert compensation.status == "confirmed"
    assert compensation.provider_ref.startswith("re_")
    assert paid.status == "compensated"
    refunds = [t for t in payments_provider.transactions() if t["object"] == "refund"]
    assert len(refunds) == 1
    assert refunds[0]["idempotency_key"] == compensation.idempotency_key
    # A second run (a duplicate job) sends nothing more.
    assert execute_one(compensation.id) is False
    assert len([t for t in payments_provider.transactions() if t["object"] == "refund"]) == 1


def test_a_decision_itself_cannot_be_decided_on(olga, unknown):
    post_decision(signed_in(olga), unknown, "fail", evidence="declined")
    [decision] = decisions_on(unknown)
    response = post_decision(signed_in(olga), decision, "cancel")
    assert response.status_code == 404
    assert EffectEvent.objects.filter(effect=decision).count() == 1


def test_refunding_a_duplicate_leaves_the_charge_itself_confirmed(
    olga, alice, payments_provider, tools
):
    """The provider charged twice; the operator refunds the second charge from the duplicate
    item. The refund is a compensation of the effect, but the effect's own charge stands: it
    stays confirmed, and its timeline says the duplicate was refunded."""
    for name in ("charge_card", "refund_card"):
        tools[name].reconciler_config = {"base_url": payments_provider.url}
        tools[name].save()
    intent = alice.intent(step_id="pay", claim=True, request={"amount": "12.50", "currency": "EUR"})
    first, second = (
        payments_provider.http.post(
            "/charges",
            json={"amount": "12.50", "currency": "EUR", "account": intent["target"]},
        ).json()
        for _ in range(2)
    )
    alice.outcome(intent["id"], intent["lease_token"], provider_ref=first["id"])
    paid = Effect.objects.get(pk=intent["id"])
    open_review(paid.id, Reason.DUPLICATE)

    response = post_decision(
        signed_in(olga),
        paid,
        "compensate",
        compensation_request=f'{{"charge": "{second["id"]}", "amount": "12.50"}}',
    )
    assert response.status_code == 302, response.content
    compensation = Effect.objects.get(parent=paid, kind="compensation")
    assert execute_one(compensation.id) is True
    compensation.refresh_from_db()
    paid.refresh_from_db()
    assert compensation.status == "confirmed"
    assert paid.status == "confirmed"
    assert [e.reason for e in events_of(paid.id)][-1] == "duplicate_refunded"
    refunds = [t for t in payments_provider.transactions() if t["object"] == "refund"]
    assert [r["charge"] for r in refunds] == [second["id"]]
