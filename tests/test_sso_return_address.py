"""Where a renewed SSO session comes back to (reviews.sso.middleware, reviews.sso.views): only to
a page of this site, however the link that started the renewal was spelt.

Through the real OpenID Connect provider (tests/fixtures/idp.py): the ledger is Django's test
client (so a request target such as `//evil.example/phish` reaches it as a server would pass
it), the provider's side of the browser is an HTTP client with the provider's cookies. Nothing
is mocked: the provider signs the person in, answers the renewal with `prompt=none`, and the
ledger exchanges the code and checks the ID token against the provider's published key.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from django.test import Client
from django.utils.http import url_has_allowed_host_and_scheme

from reviews.sso import provider
from tests.fixtures.idp import CLIENT_ID, CLIENT_SECRET, Provider, Sso

LEDGER = "http://testserver"


@pytest.fixture
def sso_here(idp: Provider, db, settings) -> Iterator[Sso]:
    """Single sign-on on, with the provider sending people back to the test client's host."""
    idp.control(
        action="client",
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        redirect_uris=[f"{LEDGER}/oidc/callback/"],
        post_logout_redirect_uris=[f"{LEDGER}/login/"],
    )
    idp.control(action="fault", mode="")
    provider._cache.clear()
    on = Sso(idp, LEDGER, settings)
    on.configure()
    yield on


def through_provider(browser: httpx.Client, url: str, username: str) -> str:
    """Follow the provider's redirects (signing in on its login page when it shows it) until
    one leads back to the ledger; that address, as a path with its query."""
    for _ in range(10):
        if url.startswith(LEDGER):
            parts = urlsplit(url)
            return f"{parts.path}?{parts.query}"
        response = browser.get(url)
        if response.status_code == 200 and "IdP username" in response.text:
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.text)
            assert token, response.text
            response = browser.post(
                str(response.url),
                data={
                    "csrfmiddlewaretoken": token.group(1),
                    "username": username,
                    "password": username * 2,
                    "next": response.url.params.get("next", ""),
                },
                headers={"Referer": str(response.url)},
            )
        assert response.status_code == 302, (response.status_code, response.text[:500])
        url = str(response.url.join(response.headers["Location"]))
    pytest.fail("the provider never sent the browser back to the ledger")


@pytest.fixture
def signed_in(sso_here: Sso) -> Iterator[tuple[Client, httpx.Client]]:
    """pia, an operator at the provider, signed in to the ledger through it."""
    sso_here.person("pia", ["ledger-ops"])
    ledger = Client()
    with httpx.Client(timeout=10) as browser:
        start = ledger.get("/oidc/authenticate/")
        assert start.status_code == 302
        callback = through_provider(browser, start["Location"], "pia")
        assert ledger.get(callback).status_code == 302
        assert ledger.get("/").status_code == 200
        yield ledger, browser


def lapse(ledger: Client) -> None:
    """Past the refresh interval: the next page load renews through the provider."""
    session = ledger.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()


def renew(ledger: Client, browser: httpx.Client, target: str) -> str:
    """Load `target` (a raw request target) on a lapsed session and complete the silent
    renewal; where the ledger's callback then sends the browser."""
    lapse(ledger)
    path, _, query = target.partition("?")
    # As a WSGI server passes it: the path percent-decoded, the query as it came.
    response = ledger.get("/", PATH_INFO=unquote(path, "iso-8859-1"), QUERY_STRING=query)
    assert response.status_code == 302
    assert "prompt=none" in response["Location"]
    callback = through_provider(browser, response["Location"], "pia")
    back = ledger.get(callback)
    assert back.status_code == 302, back.content[:500]
    return back["Location"]


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/phish",
        "/%2F%2Fevil.example/",
        "/%2f%2fevil.example/phish?x=1",
        "/\\evil.example",
        "/%5Cevil.example",
        "/%5C%5Cevil.example/",
        "/\\/evil.example",
    ],
)
def test_a_renewal_started_by_a_link_off_the_site_comes_back_to_the_overview(signed_in, target):
    ledger, browser = signed_in
    location = renew(ledger, browser, target)
    assert location == "/"
    assert ledger.get(location).status_code == 200  # still signed in, renewed


def test_a_renewal_keeps_a_page_of_the_site_with_its_query(signed_in):
    ledger, browser = signed_in
    location = renew(ledger, browser, "/queue/?tool=charge_card&page=2")
    assert location == "/queue/?tool=charge_card&page=2"
    assert url_has_allowed_host_and_scheme(location, {"testserver"})


@pytest.mark.parametrize(
    "stored", ["//evil.example/phish", "https://evil.example/", "/\\evil.example", "///x.example"]
)
def test_the_callback_never_follows_a_stored_address_off_the_site(signed_in, stored):
    """A return address stored by anything else (an older process during a deploy) is checked
    again where it is used."""
    ledger, browser = signed_in
    lapse(ledger)
    response = ledger.get("/queue/")
    assert "prompt=none" in response["Location"]
    session = ledger.session
    session["oidc_login_next"] = stored
    session.save()
    back = ledger.get(through_provider(browser, response["Location"], "pia"))
    assert (back.status_code, back["Location"]) == (302, "/")
