"""The admin lists and shows every model; the ledger's history is read-only there."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from ledger.models import Effect, EffectEvent, ReviewItem


@pytest.fixture
def admin_client_logged_in(db) -> Client:
    admin = User.objects.create_superuser("root", password="a long passphrase 42")
    client = Client()
    client.force_login(admin)
    return client


MODELS = ["agent", "apikey", "tool", "effect", "effectevent", "effectdependency", "run"]


@pytest.mark.parametrize("model", MODELS)
def test_every_ledger_model_has_a_working_list_page(admin_client_logged_in, alice, model):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"])
    response = admin_client_logged_in.get(reverse(f"admin:ledger_{model}_changelist"))
    assert response.status_code == 200


def test_an_effect_page_shows_its_timeline_and_cannot_be_edited(admin_client_logged_in, alice):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_55")
    url = reverse("admin:ledger_effect_change", args=[effect["id"]])
    page = admin_client_logged_in.get(url)
    assert page.status_code == 200
    assert b"ch_55" in page.content
    assert b"dispatching" in page.content
    admin_client_logged_in.post(url, {"status": "failed"})
    assert Effect.objects.get(pk=effect["id"]).status == "confirmed"


def test_events_cannot_be_deleted_from_the_admin(admin_client_logged_in, alice):
    effect = alice.intent()
    event = EffectEvent.objects.get(effect_id=effect["id"])
    url = reverse("admin:ledger_effectevent_delete", args=[event.id])
    assert admin_client_logged_in.post(url, {"post": "yes"}).status_code == 403
    assert EffectEvent.objects.filter(pk=event.id).exists()


def test_the_review_queue_is_in_the_admin(admin_client_logged_in, alice):
    effect = alice.intent()
    from ledger.reviewqueue import open_review

    open_review(effect["id"], "no_lookup")
    response = admin_client_logged_in.get(reverse("admin:ledger_reviewitem_changelist"))
    assert response.status_code == 200
    assert ReviewItem.objects.count() == 1
