"""EffectEvent rows are append-only, enforced by PostgreSQL, whoever asks."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from ledger.models import EffectEvent


@pytest.fixture
def event(alice) -> EffectEvent:
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    return EffectEvent.objects.filter(effect_id=effect["id"]).latest("id")


def test_raw_sql_cannot_update_an_event(event):
    with (
        pytest.raises(DatabaseError, match="Cannot update or delete"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE ledger_effectevent SET reason = 'edited' WHERE id = %s", [event.id])
    event.refresh_from_db()
    assert event.reason == "confirmed"


def test_raw_sql_cannot_delete_an_event(event):
    with (
        pytest.raises(DatabaseError, match="Cannot update or delete"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM ledger_effectevent WHERE id = %s", [event.id])
    assert EffectEvent.objects.filter(pk=event.pk).exists()


def test_the_orm_cannot_update_or_delete_an_event_either(event):
    with pytest.raises(DatabaseError), transaction.atomic():
        EffectEvent.objects.filter(pk=event.pk).update(actor="someone else")
    with pytest.raises(DatabaseError), transaction.atomic():
        EffectEvent.objects.filter(pk=event.pk).delete()
    assert EffectEvent.objects.get(pk=event.pk).actor == "agent:alice"


def test_each_event_carries_a_digest_of_what_changed(event):
    from ledger.policy import digests
    assert event.digest == digests.content_digest(event.data)
    assert event.data["provider_ref"] == "ch_1"
    assert event.from_status == "dispatching"
    assert event.to_status == "confirmed"
