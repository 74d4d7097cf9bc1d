"""Keys of what operators' decisions create are derived from what the ledger holds, never drawn
at random (docs/concepts.md#decision-keys): the same refund decided again on a database
restored from before the first one gets the same effect key, and so the same idempotency key
at the provider, which refunds once. Two different decisions still get different keys, a
decision sent twice stays one, and a key that is taken is refused, never merged."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from ledger.models import Effect, EffectEvent, ReviewItem, Run
from reconcilers.execution import execute_one
from reviews.decisions.decide import AlreadyDecided, Ask, decide
from tests.factories import signed_in, tampering
from tests.test_decisions import decisions_on, post_decision

EMAIL = {"compensation_tool": "send_email", "compensation_request": '{"body": "Sorry."}'}


def _refunds(provider) -> list[dict[str, Any]]:
    return [t for t in provider.transactions() if t["object"] == "refund"]


def _paid(alice, payments_provider, tools) -> tuple[Effect, dict[str, Any]]:
    """A charge confirmed at the payments sandbox (which honours idempotency keys)."""
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
    return Effect.objects.get(pk=intent["id"]), charge


def _backup(effect: Effect) -> dict[str, Any]:
    """What a backup taken now holds of `effect` and of what will be written after it."""
    return {
        "effects": set(Effect.objects.values_list("id", flat=True)),
        "events": set(EffectEvent.objects.values_list("id", flat=True)),
        "items": set(ReviewItem.objects.values_list("id", flat=True)),
        "effect": Effect.objects.filter(pk=effect.pk).values().get(),
        "runs": list(Run.objects.values("id", "last_seq")),
    }


def _restore(backup: dict[str, Any]) -> None:
    """Put the database back as the backup found it, as a restore does: every row written
    since is gone (the append-only guards do not see a restore), the effect is as it was."""
    table = Effect._meta.db_table
    effect = backup["effect"]
    with tampering() as cursor:
        new_items = ReviewItem.objects.exclude(id__in=backup["items"])
        cursor.execute(
            f"DELETE FROM {ReviewItem._meta.db_table} WHERE id = ANY(%s)",
            [list(new_items.values_list("id", flat=True))],
        )
        new_events = EffectEvent.objects.exclude(id__in=backup["events"])
        cursor.execute(
            f"DELETE FROM {EffectEvent._meta.db_table} WHERE id = ANY(%s)",
            [list(new_events.values_list("id", flat=True))],
        )
        new_effects = Effect.objects.exclude(id__in=backup["effects"])
        cursor.execute(
            f"DELETE FROM {table} WHERE id = ANY(%s)",
            [list(new_effects.values_list("id", flat=True))],
        )
        cursor.execute(
            f"UPDATE {table} SET status = %s, version = %s, updated_at = %s, resolved_at = %s "
            "WHERE id = %s",
            [
                effect["status"],
                effect["version"],
                effect["updated_at"],
                effect["resolved_at"],
                effect["id"],
            ],
        )
        for run in backup["runs"]:
            cursor.execute(
                f"UPDATE {Run._meta.db_table} SET last_seq = %s WHERE id = %s",
                [run["last_seq"], run["id"]],
            )


def _refund(client, paid: Effect, charge: dict[str, Any]):
    return post_decision(
        client,
        paid,
        "compensate",
        compensation_request=f'{{"charge": "{charge["id"]}", "amount": "12.50"}}',
    )


def test_a_refund_decided_again_after_a_restore_keeps_its_key_and_refunds_once(
    olga, alice, payments_provider, tools
):
    paid, charge = _paid(alice, payments_provider, tools)
    backup = _backup(paid)
    client = signed_in(olga)

    assert _refund(client, paid, charge).status_code == 302
    [first] = Effect.objects.filter(parent=paid, kind="compensation")
    [first_decision] = decisions_on(paid)
    assert first.effect_key == f"{paid.effect_key}:comp:decision-1"
    assert execute_one(first.id) is True
    assert len(_refunds(payments_provider)) == 1

    # The database goes back to the backup: the decision, its refund and its events are lost,
    # though the provider refunded. The operator sees the charge confirmed and decides again.
    _restore(backup)
    paid.refresh_from_db()
    assert paid.status == "confirmed"
    assert not Effect.objects.filter(parent=paid).exists()

    assert _refund(client, paid, charge).status_code == 302
    [again] = Effect.objects.filter(parent=paid, kind="compensation")
    assert again.id != first.id
    assert (again.effect_key, again.idempotency_key) == (first.effect_key, first.idempotency_key)
    assert decisions_on(paid)[0].effect_key == first_decision.effect_key
    assert execute_one(again.id) is True
    again.refresh_from_db()
    # The provider knows the key: the same refund again, not a second one.
    [refund] = _refunds(payments_provider)
    assert refund["idempotency_key"] == first.idempotency_key
    assert again.provider_ref == refund["id"]


def test_two_compensations_of_one_effect_get_their_ordinals_also_after_a_restore(
    olga, make_effect
):
    sent = make_effect("confirmed", tool="send_email", provider_ref="msg_1")
    client = signed_in(olga)
    assert post_decision(client, sent, "compensate", **EMAIL).status_code == 302
    [first] = Effect.objects.filter(parent=sent, kind="compensation")
    # Nobody sent it: the operator cancels it, then decides another one.
    assert post_decision(client, first, "cancel").status_code == 302
    sent.refresh_from_db()
    backup = _backup(sent)
    assert post_decision(client, sent, "compensate", **EMAIL).status_code == 302
    second = Effect.objects.filter(parent=sent, kind="compensation").exclude(pk=first.pk).get()
    assert first.effect_key == f"{sent.effect_key}:comp:decision-1"
    assert second.effect_key == f"{sent.effect_key}:comp:decision-2"
    assert second.idempotency_key != first.idempotency_key

    _restore(backup)
    assert post_decision(client, sent, "compensate", **EMAIL).status_code == 302
    again = Effect.objects.filter(parent=sent, kind="compensation").exclude(pk=first.pk).get()
    assert (again.effect_key, again.idempotency_key) == (second.effect_key, second.idempotency_key)


def test_a_compensation_sent_twice_stays_one(olga, make_effect):
    """A double click: the same form posted twice, on the same version of the effect."""
    sent = make_effect("confirmed", tool="send_email", provider_ref="msg_1")
    client = signed_in(olga)
    assert post_decision(client, sent, "compensate", **EMAIL).status_code == 302
    twice = post_decision(client, sent, "compensate", **EMAIL)
    assert twice.status_code == 409
    assert "Already decided by olga (compensate)" in twice.content.decode()
    assert Effect.objects.filter(parent=sent, kind="compensation").count() == 1
    assert len(decisions_on(sent)) == 1


@pytest.mark.django_db(transaction=True)
def test_two_operators_compensating_at_once_record_one_compensation(olga, otto, make_effect):
    sent = make_effect("confirmed", tool="send_email", provider_ref="msg_1")
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}
    ask = Ask(
        "compensate",
        "the customer asked",
        sent.version,
        compensation_tool="send_email",
        compensation_request={"body": "Sorry."},
    )

    def act(user) -> None:
        barrier.wait()
        try:
            results[user.username] = decide(sent.id, ask, user=user)
        except AlreadyDecided as exc:
            results[user.username] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=act, args=(user,)) for user in (olga, otto)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    lost = [r for r in results.values() if isinstance(r, AlreadyDecided)]
    assert len(lost) == 1, results
    [compensation] = Effect.objects.filter(parent=sent, kind="compensation")
    assert compensation.effect_key == f"{sent.effect_key}:comp:decision-1"
    assert len(decisions_on(sent)) == 1


@pytest.mark.parametrize("same_request", [True, False])
def test_a_compensation_whose_key_is_taken_is_refused_not_merged(
    olga, make_effect, same_request
):
    sent = make_effect("confirmed", tool="send_email", provider_ref="msg_1")
    request = {"body": "Sorry."} if same_request else {"body": "Something else."}
    squatter = make_effect(
        "planned",
        tool="send_email",
        effect_key=f"{sent.effect_key}:comp:decision-1",
        request=request,
    )
    refused = post_decision(signed_in(olga), sent, "compensate", **EMAIL)
    assert refused.status_code == 409
    assert "is taken by another effect already" in refused.content.decode()
    assert not Effect.objects.filter(parent=sent).exists()
    squatter.refresh_from_db()
    assert (squatter.status, squatter.version) == ("planned", 1)


def test_compensations_keyed_before_count_among_the_ordinals(olga, make_effect):
    """Keys recorded before (`decision-<uuid>`) stay valid and are not rewritten."""
    sent = make_effect("confirmed", tool="send_email", provider_ref="msg_1")
    old_key = f"{sent.effect_key}:comp:decision-0b6a3f57-5a4e-4d07-9a55-2f8d1c3e9b10"
    old = make_effect(
        "failed", tool="send_email", kind="compensation", parent=sent, effect_key=old_key
    )
    assert post_decision(signed_in(olga), sent, "compensate", **EMAIL).status_code == 302
    new = Effect.objects.filter(parent=sent, kind="compensation").exclude(pk=old.pk).get()
    assert new.effect_key == f"{sent.effect_key}:comp:decision-2"
    old.refresh_from_db()
    assert old.effect_key == old_key


def test_an_agent_cannot_take_the_operators_compensation_keys(alice):
    effect = alice.intent(step_id="pay", claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    refused = alice.post(
        f"/effects/{effect['id']}/compensate",
        {"request": {"charge": "ch_1"}, "compensation_key": "decision-1"},
    )
    assert refused.status_code == 422
    assert "decision-" in refused.json()["fields"]["compensation_key"]
    assert not Effect.objects.filter(kind="compensation").exists()
