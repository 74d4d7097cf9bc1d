"""Single sign-on in Chromium, against a real OpenID Connect provider in its own process
(`tests/fixtures/idp.py`: django-oauth-toolkit), reached as localhost while the ledger is
127.0.0.1. Nothing is mocked: the browser follows every redirect, the ledger exchanges the code
and checks the ID token against the provider's published key."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from playwright.sync_api import Page, expect

from ledger.models import Reason, RetryProposal
from ledger.rules.reviewqueue import open_review
from reviews.models import Identity
from reviews.sso.people import username_for
from tests.browser.conftest import confirm_decision, fill_decision
from tests.helpers import PASSWORD

pytestmark = pytest.mark.browser
# A little more than the refresh interval the removal test sets (3 s).
REFRESH_WAIT = 3.5


def sso_sign_in(page: Page, sso, username: str) -> None:
    """From the ledger's login page through the provider's, as a person would."""
    page.goto(f"{sso.ledger}/login/")
    page.get_by_role("link", name="Sign in with the test provider").click()
    page.get_by_label("IdP username").fill(username)
    page.get_by_label("IdP password").fill(username * 2)
    page.get_by_role("button", name="Continue").click()


def test_a_person_signs_in_with_their_role_mapped(open_page, sso):
    sub = sso.person("pia", ["ledger-ops", "unrelated"], family_name="Pilot")
    page = open_page()
    sso_sign_in(page, sso, "pia")
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    username = username_for(sso.idp.issuer, sub)
    expect(page.locator("header .who")).to_contain_text(username)
    user = User.objects.get(username=username)
    assert Identity.objects.get(user=user).subject == sub
    assert set(user.groups.values_list("name", flat=True)) == {"operator"}
    assert (user.first_name, user.last_name) == ("Pia", "Pilot")
    assert not user.has_usable_password()


def test_a_person_whose_groups_map_to_no_role_is_refused_without_a_session(open_page, sso):
    sso.person("nils", ["marketing"])
    page = open_page()
    with page.expect_response(lambda r: "/oidc/callback/" in r.url) as callback:
        sso_sign_in(page, sso, "nils")
    assert callback.value.status == 403
    expect(page.get_by_role("heading", name="Sign-in refused")).to_be_visible()
    expect(page.locator("#sso-refused")).to_contain_text("none of your groups gives you a role")
    page.goto(f"{sso.ledger}/")
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    assert not Identity.objects.exists()


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("tampered", "signature does not verify"),
        ("expired", "has expired"),
        ("audience", "issued for another application"),
    ],
)
def test_a_bad_id_token_is_refused_with_a_page_that_says_why(open_page, sso, fault, words):
    sso.person("tara", ["ledger-ops"])
    sso.fault(fault)
    page = open_page()
    with page.expect_response(lambda r: "/oidc/callback/" in r.url) as callback:
        sso_sign_in(page, sso, "tara")
    assert callback.value.status == 403
    expect(page.locator("#sso-refused")).to_contain_text(words)
    page.goto(f"{sso.ledger}/queue/")
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    assert not User.objects.filter(username__startswith="sso.").exists()


def test_signing_out_ends_the_providers_session_too(open_page, sso):
    sso.person("sam", ["ledger-audit"])
    page = open_page()
    sso_sign_in(page, sso, "sam")
    expect(page.locator("header .who")).to_contain_text("(read only)")
    with page.expect_response(lambda r: "/o/logout/" in r.url) as provider_logout:
        page.get_by_role("button", name="Sign out").click()
    assert provider_logout.value.status == 302
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    assert page.url.startswith(f"{sso.ledger}/login/")
    page.goto(f"{sso.ledger}/")
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    # Signed out at the provider as well: signing in again asks for the password there.
    page.get_by_role("link", name="Sign in with the test provider").click()
    expect(page.get_by_label("IdP username")).to_be_visible()


def sign_in_locally(page: Page, sso, user: User) -> None:
    page.goto(f"{sso.ledger}/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()


def test_a_removed_person_loses_access_within_the_refresh_interval(open_page, sso):
    sso.configure(LEDGER_OIDC_REFRESH_SECONDS="3")
    sso.person("pia", ["ledger-ops"])
    sso.person("rex", ["ledger-ops"])
    full, partial = open_page(), open_page()
    for page, name in ((full, "pia"), (partial, "rex")):
        sso_sign_in(page, sso, name)
        expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
        page.goto(f"{sso.ledger}/queue/")
        expect(page.get_by_role("heading", name="Review queue", level=1)).to_be_visible()

    # Past the interval, a page load renews the session through the provider, silently, and
    # takes the roles again: pia's group changed there, so she reads only now.
    sso.person("pia", ["ledger-audit"])
    time.sleep(REFRESH_WAIT)
    with full.expect_response(lambda r: "prompt=none" in r.url):
        full.reload()
    expect(full.get_by_role("heading", name="Review queue", level=1)).to_be_visible()
    expect(full.locator("header .who")).to_contain_text("(read only)")

    # pia's tab is away from the ledger (the queue's own polling would renew it first), so
    # her next request is a full page load; rex's stays on the queue, which polls with htmx.
    full.goto("about:blank")
    polled = lambda r: r.request.headers.get("hx-request") == "true" and r.status == 401  # noqa: E731
    with partial.expect_response(polled, timeout=15_000) as hx:
        sso.remove("pia")
        sso.remove("rex")
        time.sleep(REFRESH_WAIT)
    full.goto(f"{sso.ledger}/queue/")
    expect(full.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    expect(full.get_by_role("status")).to_contain_text("did not sign you in")

    # The htmx request got 401 with HX-Redirect: the whole page went to renew, and the login
    # page was never swapped into the queue's results.
    assert "/queue/" in hx.value.headers["hx-redirect"]
    expect(partial.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    expect(partial.get_by_role("heading", level=1)).to_have_count(1)
    expect(partial.locator("#results")).to_have_count(0)
    for page in (full, partial):
        page.goto(f"{sso.ledger}/queue/")
        expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()


def test_four_eyes_holds_across_a_local_and_an_sso_account_of_one_person(
    open_page, sso, olga, otto, make_effect
):
    email = make_effect("unknown", tool="send_email", attempt=1, effect_key="order-7:email")
    open_review(email.id, Reason.NO_LOOKUP)
    local = open_page()
    sign_in_locally(local, sso, olga)
    local.goto(f"{sso.ledger}/effects/{email.id}/")
    fill_decision(local, "retry", evidence="Mail log: never handed to the relay", reason="resend")
    local.locator("#decide-retry").get_by_label(
        "I checked with the provider: it never received this request"
    ).check()
    confirm_decision(local, "retry")
    expect(local.locator("#four-eyes")).to_contain_text("another operator must decide")
    local.goto("about:blank")  # the effect page's polling would follow the session's end first

    # The same human signs in through the provider; an admin links the two accounts.
    sub = sso.person("olga-sso", ["ledger-ops"])
    same = open_page()
    sso_sign_in(same, sso, "olga-sso")
    expect(same.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    call_command("linkaccounts", "olga", username_for(sso.idp.issuer, sub), stdout=io.StringIO())

    same.goto(f"{sso.ledger}/effects/{email.id}/")
    expect(same.locator("#four-eyes")).to_contain_text("olga asked for it")
    expect(same.locator("#decide-approve")).to_have_count(0)
    email.refresh_from_db()
    forged = same.request.post(
        f"{sso.ledger}/effects/{email.id}/decide/approve",
        form={
            "csrfmiddlewaretoken": csrf_of(same),
            "version": str(email.version),
            "reason": "approving my own request",
            "confirm": "on",
        },
        max_redirects=0,
    )
    assert forged.status == 409
    assert "four-eyes needs another operator" in forged.text()
    assert RetryProposal.objects.get(effect=email).decided_at is None

    # The linked local account cannot sign in with its password any more.
    local.goto(f"{sso.ledger}/")
    expect(local.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    sign_in_locally(local, sso, olga)
    expect(local.get_by_role("alert")).to_contain_text("did not match")
    expect(local.get_by_role("heading", name="Sign in", level=1)).to_be_visible()

    # Another person approves.
    other = open_page()
    sign_in_locally(other, sso, otto)
    other.goto(f"{sso.ledger}/effects/{email.id}/")
    fill_decision(other, "approve", reason="Relay log agrees: not sent")
    confirm_decision(other, "approve")
    expect(other.locator("#effect-status")).to_have_text("planned")
    assert RetryProposal.objects.get(effect=email).decided_by == otto


def csrf_of(page: Page) -> str:
    headers = page.locator("body").get_attribute("hx-headers") or "{}"
    return json.loads(headers)["X-CSRFToken"]


def test_with_local_login_off_the_page_offers_only_sso_and_a_password_is_refused(
    open_page, sso, olga
):
    sso.configure(LEDGER_LOCAL_LOGIN="false")
    page = open_page()
    page.goto(f"{sso.ledger}/login/")
    expect(page.get_by_role("link", name="Sign in with the test provider")).to_be_visible()
    expect(page.get_by_label("Username")).to_have_count(0)
    refused = page.request.post(
        f"{sso.ledger}/login/",
        form={"csrfmiddlewaretoken": csrf_of(page), "username": "olga", "password": PASSWORD},
        max_redirects=0,
    )
    assert refused.status == 403
    assert "Signing in with a password is turned off" in refused.text()
    page.goto(f"{sso.ledger}/")
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
