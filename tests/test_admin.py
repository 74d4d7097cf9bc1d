"""The admin lists and shows every model; the ledger's history is read-only there."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from ledger.containment.keys import revoke
from ledger.models import ApiKey, Effect, EffectEvent, ReviewItem
from ledger.rules.reviewqueue import open_review
from tests.helpers import events_of


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
    open_review(effect["id"], "no_lookup")
    response = admin_client_logged_in.get(reverse("admin:ledger_reviewitem_changelist"))
    assert response.status_code == 200
    assert ReviewItem.objects.count() == 1


def test_a_review_item_cannot_be_closed_from_the_admin(admin_client_logged_in, alice):
    effect = alice.intent()
    open_review(effect["id"], "no_lookup")
    item = ReviewItem.objects.get(effect_id=effect["id"])
    url = reverse("admin:ledger_reviewitem_change", args=[item.id])
    admin_client_logged_in.post(
        url,
        {
            "due_at_0": "2030-01-01",
            "due_at_1": "00:00:00",
            "resolved_at_0": "2024-01-01",
            "resolved_at_1": "00:00:00",
            "resolution": "closed by hand",
            "decision": effect["id"],
        },
    )
    item.refresh_from_db()
    assert item.resolved_at is None and item.resolution == "" and item.decision_id is None
    assert [e.kind for e in events_of(effect["id"])] == ["intent"]


def test_a_review_item_cannot_be_deleted_from_the_admin(admin_client_logged_in, alice):
    effect = alice.intent()
    open_review(effect["id"], "no_lookup")
    item = ReviewItem.objects.get(effect_id=effect["id"])
    url = reverse("admin:ledger_reviewitem_delete", args=[item.id])
    assert admin_client_logged_in.post(url, {"post": "yes"}).status_code == 403
    assert ReviewItem.objects.filter(pk=item.id).exists()


def _revoked_key(agent) -> ApiKey:
    key = ApiKey.objects.get(agent=agent)
    assert revoke(key.prefix)
    key.refresh_from_db()
    return key


def test_a_revoked_key_cannot_be_brought_back_from_its_admin_page(admin_client_logged_in, alice):
    key = _revoked_key(alice.agent)
    url = reverse("admin:ledger_apikey_change", args=[key.id])
    form = {"label": "back again", "revoked_at_0": "", "revoked_at_1": ""}
    assert admin_client_logged_in.post(url, form).status_code == 302  # saved
    key.refresh_from_db()
    assert key.label == "back again" and key.revoked_at is not None
    assert alice.get("/effects").status_code == 401


def test_a_revoked_key_cannot_be_brought_back_from_its_agents_page(admin_client_logged_in, alice):
    key = _revoked_key(alice.agent)
    url = reverse("admin:ledger_agent_change", args=[alice.agent.id])
    response = admin_client_logged_in.post(
        url,
        {
            "name": alice.agent.name,
            "is_active": "on",
            "created_at_0": f"{alice.agent.created_at:%Y-%m-%d}",
            "created_at_1": f"{alice.agent.created_at:%H:%M:%S}",
            "keys-TOTAL_FORMS": "1",
            "keys-INITIAL_FORMS": "1",
            "keys-MIN_NUM_FORMS": "0",
            "keys-MAX_NUM_FORMS": "1000",
            "keys-0-id": str(key.id),
            "keys-0-agent": str(alice.agent.id),
            "keys-0-label": "back again",
            "keys-0-revoked_at_0": "",
            "keys-0-revoked_at_1": "",
        },
    )
    assert response.status_code == 302  # saved: the agent's own fields were valid
    key.refresh_from_db()
    assert key.label == "back again" and key.revoked_at is not None
    assert alice.get("/effects").status_code == 401


def test_an_admin_revokes_keys_with_the_list_action(admin_client_logged_in, alice):
    key = ApiKey.objects.get(agent=alice.agent)
    response = admin_client_logged_in.post(
        reverse("admin:ledger_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [str(key.id)]},
    )
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert alice.get("/effects").status_code == 401
