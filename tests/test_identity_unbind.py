"""Bindings to the identity provider in the admin (issue 34, I1): never deleted there, since a
deleted binding locks its person out with no trace; ended only by the recorded action, which
needs a reason. Through the real admin, with a superuser signed in."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from ledger.errors import ValidationFailed
from ledger.models import Effect
from ledger.models.states import Kind
from reviews.models import Identity
from reviews.sso import people

ISSUER = "https://idp.example.com"


@pytest.fixture
def root(db) -> Client:
    admin = User.objects.create_superuser("root", password="a long passphrase 42")
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def binding(db) -> Identity:
    user = User.objects.create_user(people.username_for(ISSUER, "00u1pia"))
    return Identity.objects.create(issuer=ISSUER, subject="00u1pia", user=user)


def unbinds() -> list[Effect]:
    return list(Effect.objects.filter(kind=Kind.DECISION, provenance__action="unbind_identity"))


def test_the_admin_refuses_to_delete_a_binding(root, binding):
    url = reverse("admin:reviews_identity_delete", args=[binding.pk])
    assert root.get(url).status_code == 403
    assert root.post(url, {"post": "yes"}).status_code == 403
    # Nor through the list's bulk delete, which is not offered.
    changelist = reverse("admin:reviews_identity_changelist")
    assert "delete_selected" not in root.get(changelist).content.decode()
    root.post(
        changelist,
        {"action": "delete_selected", "_selected_action": [binding.pk], "post": "yes"},
    )
    assert Identity.objects.filter(pk=binding.pk).exists()
    assert not unbinds()


def test_unbinding_with_a_reason_is_recorded(root, binding):
    changelist = reverse("admin:reviews_identity_changelist")
    chosen = {"action": "unbind", "_selected_action": [binding.pk]}
    form = root.post(changelist, chosen)
    assert form.status_code == 200
    assert "00u1pia" in form.content.decode() and 'name="reason"' in form.content.decode()

    done = root.post(changelist, {**chosen, "apply": "yes", "reason": "left the company"})

    assert done.status_code == 302
    assert not Identity.objects.filter(pk=binding.pk).exists()
    [decision] = unbinds()
    account = binding.user.get_username()
    assert decision.target == f"identity:{account}"
    assert decision.provenance["actor"] == "operator:root"
    assert decision.provenance["reason"] == "left the company"
    assert (decision.provenance["issuer"], decision.provenance["subject"]) == (ISSUER, "00u1pia")
    assert decision.agent.name == "system" and decision.run_id == people.DECISIONS_RUN
    entry = LogEntry.objects.get(object_id=str(binding.user.pk))
    assert "left the company" in entry.get_change_message()
    assert User.objects.filter(pk=binding.user.pk).exists()  # the account and its history stay


@pytest.mark.parametrize("reason", ["", "   "])
def test_unbinding_without_a_reason_is_refused_and_changes_nothing(root, binding, reason):
    changelist = reverse("admin:reviews_identity_changelist")
    response = root.post(
        changelist,
        {"action": "unbind", "_selected_action": [binding.pk], "apply": "yes", "reason": reason},
    )
    assert response.status_code == 400
    assert "This field is required" in response.content.decode()
    assert Identity.objects.filter(pk=binding.pk).exists()
    assert not unbinds()


def test_unbind_itself_needs_a_reason_and_records_once(binding):
    with pytest.raises(ValidationFailed):
        people.unbind(binding, reason=" ", by="shell:root")
    assert Identity.objects.filter(pk=binding.pk).exists()
    assert people.unbind(binding, reason="wrong subject", by="shell:root")
    assert not people.unbind(binding, reason="again", by="shell:root")
    assert len(unbinds()) == 1
