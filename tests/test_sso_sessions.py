"""Short SSO sessions (reviews.sso.middleware): past the renewal interval nothing is carried out
until the provider has been asked again. The round trip itself, through a real provider, is in
tests/browser/test_sso_browser.py; here the ledger's side of each kind of request."""

from __future__ import annotations

import socket
import time

import pytest
from django.test import Client

from ledger.models import Halt
from reviews.sso import provider
from reviews.sso.config import read
from reviews.sso.views import BACKEND

CONFIG = read(
    {
        "LEDGER_OIDC_ISSUER": "https://idp.example.com",
        "LEDGER_OIDC_CLIENT_ID": "effect-ledger",
        "LEDGER_OIDC_CLIENT_SECRET": "s3cret-s3cret",
        "LEDGER_OIDC_ROLES": '{"ops": "operator"}',
        "LEDGER_OIDC_AUTHORIZATION_ENDPOINT": "https://idp.example.com/authorize",
        "LEDGER_OIDC_END_SESSION_ENDPOINT": "https://idp.example.com/logout",
    }
)


@pytest.fixture
def lapsed(olga, settings) -> Client:
    """olga, signed in through the provider, her renewal due."""
    settings.LEDGER_SSO = CONFIG
    client = Client()
    client.force_login(olga, backend=BACKEND)
    session = client.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session["oidc_id_token"] = "the-id-token"
    session.save()
    return client


def test_a_page_load_goes_through_the_provider_without_a_prompt(lapsed):
    response = lapsed.get("/queue/?tool=charge_card")
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith("https://idp.example.com/authorize?")
    assert "prompt=none" in location and "code_challenge_method=S256" in location
    assert lapsed.session["oidc_login_next"] == "/queue/?tool=charge_card"


def test_an_htmx_request_gets_401_with_hx_redirect_to_its_page(lapsed):
    response = lapsed.get(
        "/queue/",
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/queue/?page=2"},
    )
    assert response.status_code == 401
    assert response["HX-Redirect"] == "http://testserver/queue/?page=2"
    assert b"Sign in" not in response.content


def test_an_htmx_request_from_elsewhere_is_sent_to_the_overview(lapsed):
    response = lapsed.get(
        "/queue/", headers={"HX-Request": "true", "HX-Current-URL": "https://evil.example/"}
    )
    assert (response.status_code, response["HX-Redirect"]) == (401, "/")


def test_a_form_sent_with_a_lapsed_session_is_not_carried_out(lapsed, olga):
    response = lapsed.post("/halts/add", {"scope": "all", "value": "", "reason": "stop"})
    assert response.status_code == 401
    assert "Nothing was done" in response.content.decode()
    assert not Halt.objects.exists()


def test_a_fresh_session_passes_and_forms_may_lead_to_the_provider(lapsed):
    session = lapsed.session
    session["oidc_id_token_expiration"] = time.time() + 60
    session.save()
    response = lapsed.get("/queue/")
    assert response.status_code == 200
    assert "form-action 'self' https://idp.example.com" in response["Content-Security-Policy"]


def test_signing_out_ends_the_providers_session_with_the_id_token(lapsed):
    response = lapsed.post("/logout/")
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith("https://idp.example.com/logout?")
    assert "id_token_hint=the-id-token" in location
    assert "post_logout_redirect_uri=http%3A%2F%2Ftestserver%2Flogin%2F" in location
    assert Client().get("/").status_code == 302


def test_a_local_session_is_never_sent_to_the_provider(olga, settings):
    settings.LEDGER_SSO = CONFIG
    client = Client()
    client.force_login(olga)
    assert client.get("/queue/").status_code == 200
    assert client.post("/logout/")["Location"] == "/login/"


def test_an_htmx_request_without_a_session_is_sent_to_sign_in_as_a_whole_page(db, settings):
    settings.LEDGER_SSO = CONFIG
    response = Client().get(
        "/queue/",
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/queue/?page=2"},
    )
    assert response.status_code == 401
    assert response["HX-Redirect"] == "/login/?next=%2Fqueue%2F%3Fpage%3D2"


def test_an_unreachable_provider_is_a_clear_502_never_a_500(db, settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    settings.LEDGER_SSO = read(
        {
            "LEDGER_OIDC_ISSUER": f"http://127.0.0.1:{port}/o",
            "LEDGER_OIDC_CLIENT_ID": "effect-ledger",
            "LEDGER_OIDC_CLIENT_SECRET": "s3cret-s3cret",
            "LEDGER_OIDC_ROLES": '{"ops": "operator"}',
        }
    )
    provider._cache.clear()
    response = Client().get("/oidc/authenticate/")
    assert response.status_code == 502
    assert "could not be reached" in response.content.decode()


def test_an_answer_that_belongs_to_no_sign_in_is_refused_with_a_page(db, settings):
    settings.LEDGER_SSO = CONFIG
    client = Client()
    assert client.get("/oidc/callback/?code=abc&state=made-up").status_code == 403
    session = client.session
    session["oidc_states"] = {"real": {"nonce": "n", "code_verifier": None, "added_on": 0}}
    session.save()
    response = client.get("/oidc/callback/?code=abc&state=made-up")
    assert response.status_code == 400
    assert "belongs to no sign-in started here" in response.content.decode()
    assert client.get("/").status_code == 302
