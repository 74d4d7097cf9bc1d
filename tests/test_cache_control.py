"""Pages shown to a signed-in person are never stored by a browser or a proxy: a shared
computer's back button or a cache must not replay the ledger to the next person."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ledger.rules.reviewqueue import open_review
from tests.factories import signed_in
from tests.helpers import PASSWORD


def is_no_store(response) -> bool:
    directives = {d.strip() for d in response.get("Cache-Control", "").split(",")}
    return "no-store" in directives


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", password="a long passphrase 42")


@pytest.mark.parametrize(
    "path",
    ["/", "/queue/", "/audit/exports/", "/audit/exports/effects.csv", "/audit/chain/"],
)
def test_every_page_for_a_signed_in_reader_is_not_stored(audrey, path):
    assert is_no_store(signed_in(audrey).get(path))


def test_the_effect_page_and_its_htmx_partials_are_not_stored(olga, make_effect):
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, "no_lookup")
    client = signed_in(olga)
    assert is_no_store(client.get(f"/effects/{effect.id}/"))
    assert is_no_store(client.get("/queue/", headers={"HX-Request": "true"}))
    assert is_no_store(client.get("/", headers={"HX-Request": "true"}))


def test_refusals_for_a_signed_in_person_are_not_stored_either(nemo):
    refused = signed_in(nemo).get("/queue/")
    assert refused.status_code == 403 and is_no_store(refused)


def test_admin_pages_are_not_stored(root):
    assert is_no_store(signed_in(root).get("/admin/ledger/effect/"))


def test_the_sign_in_redirect_that_follows_a_login_is_not_stored(olga):
    response = Client().post("/login/", {"username": "olga", "password": PASSWORD})
    assert response.status_code == 302 and is_no_store(response)


def test_agent_api_answers_are_not_stored(alice):
    effect = alice.intent()
    assert is_no_store(alice.get(f"/effects/{effect['id']}"))
