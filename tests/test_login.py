"""Signing in to the pages: Django's login, throttled by django-axes, under a strict CSP."""

from __future__ import annotations

import re

from django.conf import settings
from django.test import Client

from tests.conftest import PASSWORD


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
    assert scripts == ['<script src="/static/vendor/htmx-2.0.11.min.js" defer>']
    assert "<style" not in html and " style=" not in html


def test_htmx_requests_carry_the_csrf_token_from_the_body(olga):
    client = Client()
    client.force_login(olga)
    html = client.get("/queue/").content.decode()
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\"\}'>", html)
