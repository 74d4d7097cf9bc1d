"""Signing in to the pages: Django's login, throttled by django-axes, under a strict CSP."""

from __future__ import annotations

import re
from datetime import timedelta

from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tests.helpers import PASSWORD


def test_an_operator_signs_in_and_lands_on_the_overview(olga):
    client = Client()
    response = client.post("/login/", {"username": "olga", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused_with_a_message(olga):
    response = Client().post("/login/", {"username": "olga", "password": "nope"})
    assert response.status_code == 200
    assert "did not match" in response.content.decode()


def test_repeated_failures_lock_the_account_even_for_the_right_password(olga):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/login/", {"username": "olga", "password": "guess"})
    locked = client.post("/login/", {"username": "olga", "password": PASSWORD})
    assert locked.status_code == 429
    assert client.get("/").status_code == 302  # still signed out


def test_signing_out_needs_a_post(olga):
    client = Client()
    client.force_login(olga)
    assert client.get("/logout/").status_code == 405
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_pages_carry_a_strict_content_security_policy(olga):
    client = Client()
    client.force_login(olga)
    response = client.get("/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    html = response.content.decode()
    scripts = re.findall(r"<script[^>]*>", html)
    assert scripts == [
        '<script src="/static/vendor/htmx-2.0.11.min.js" defer>',
        '<script src="/static/app.js" defer>',
    ]
    assert "<style" not in html and " style=" not in html


def test_htmx_requests_carry_the_csrf_token_from_the_body(olga):
    client = Client()
    client.force_login(olga)
    html = client.get("/queue/").content.decode()
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\"\}'>", html)


def _sign_in(client: Client, username: str, password: str, address: str):
    # axes reads the client's address from REMOTE_ADDR (no proxy headers are trusted).
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_failures_from_one_address_do_not_lock_the_operator_out_from_another(olga):
    """An outsider who knows the user name locks the account at their own address only."""
    for _ in range(settings.AXES_FAILURE_LIMIT):
        assert _sign_in(Client(), "olga", "guess", "203.0.113.66").status_code in (200, 429)
    assert _sign_in(Client(), "olga", PASSWORD, "203.0.113.66").status_code == 429
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.6").status_code == 302


def _guess_from_many_addresses(username: str, count: int) -> None:
    """`count` failures, each from an address of its own (none reaches a per-address limit)."""
    for n in range(count):
        _sign_in(Client(), username, "guess", f"203.0.{113 + n // 250}.{n % 250 + 1}")


def test_failures_spread_over_many_addresses_slow_the_account_at_addresses_it_never_used(olga):
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.7").status_code == 302  # her desk
    _guess_from_many_addresses("olga", settings.LEDGER_LOGIN_ACCOUNT_LIMIT)
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.8").status_code == 429
    assert _sign_in(Client(), "olga", "guess", "192.0.2.200").status_code == 429
    # Her own address still lets her in: guessing elsewhere cannot lock her out.
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.7").status_code == 302


def test_one_failure_short_of_the_account_limit_refuses_no_address(olga):
    _guess_from_many_addresses("olga", settings.LEDGER_LOGIN_ACCOUNT_LIMIT - 1)
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.9").status_code == 302


def test_the_account_limit_slows_for_its_window_not_for_the_cool_off_hour(olga):
    _guess_from_many_addresses("olga", settings.LEDGER_LOGIN_ACCOUNT_LIMIT)
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.10").status_code == 429
    window = timedelta(seconds=settings.LEDGER_LOGIN_ACCOUNT_WINDOW)
    AccessAttempt.objects.update(attempt_time=timezone.now() - window - timedelta(seconds=1))
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.10").status_code == 302


def test_failures_against_many_accounts_from_one_address_lock_the_address(olga, otto, audrey):
    for n in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(Client(), f"nobody-{n}", "guess", "203.0.113.9")
    assert _sign_in(Client(), "olga", PASSWORD, "203.0.113.9").status_code == 429
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.1").status_code == 302


def _insider_guesses_between_own_sign_ins(address: str) -> None:
    """Otto guesses olga's password, signing in to his own account after every 4 guesses."""
    for n in range(settings.AXES_FAILURE_LIMIT):
        if n and n % (settings.AXES_FAILURE_LIMIT - 1) == 0:
            assert _sign_in(Client(), "otto", PASSWORD, address).status_code == 302
        _sign_in(Client(), "olga", "guess", address)


def test_an_insiders_own_sign_in_does_not_clear_the_victims_count(olga, otto):
    _insider_guesses_between_own_sign_ins("192.0.2.7")
    assert _sign_in(Client(), "olga", PASSWORD, "192.0.2.7").status_code == 429
    assert _sign_in(Client(), "olga", PASSWORD, "198.51.100.2").status_code == 302


def test_an_insiders_own_sign_in_does_not_clear_the_count_for_the_address(olga, otto, audrey):
    _insider_guesses_between_own_sign_ins("192.0.2.7")
    assert _sign_in(Client(), "audrey", PASSWORD, "192.0.2.7").status_code == 429
