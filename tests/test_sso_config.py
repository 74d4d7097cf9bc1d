"""Single sign-on's configuration: off unless set, and every mistake stops the start with one
clear line (reviews.sso.config)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from reviews.sso.config import django_settings, read
from tests.helpers import ROOT

GOOD = {
    "LEDGER_OIDC_ISSUER": "https://login.example.com/tenant",
    "LEDGER_OIDC_CLIENT_ID": "effect-ledger",
    "LEDGER_OIDC_CLIENT_SECRET": "s3cret-s3cret",
    "LEDGER_OIDC_ROLES": '{"ledger-ops": "operator", "ledger-audit": "auditor"}',
}


def test_nothing_set_means_no_single_sign_on_and_local_login_on():
    values = django_settings({"LEDGER_KEYS": "1:x"})
    assert values["LEDGER_SSO"] is None and values["LEDGER_LOCAL_LOGIN"] is True


def test_a_complete_configuration_has_safe_defaults():
    config = read(GOOD)
    assert config is not None
    assert (config.algorithm, config.role_claim, config.team_claim) == ("RS256", "groups", "")
    assert config.roles == {"ledger-ops": "operator", "ledger-audit": "auditor"}
    assert config.refresh_seconds == 300 and config.endpoints == {}
    assert config.discovery_url == (
        "https://login.example.com/tenant/.well-known/openid-configuration"
    )
    values = django_settings({**GOOD, "LEDGER_OIDC_REFRESH_SECONDS": "60"})
    assert values["OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"] == 60
    assert values["OIDC_USE_PKCE"] and values["OIDC_STORE_ID_TOKEN"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"LEDGER_OIDC_ISSUER": ""}, "LEDGER_OIDC_ISSUER is required"),
        ({"LEDGER_OIDC_CLIENT_SECRET": ""}, "LEDGER_OIDC_CLIENT_SECRET are required"),
        ({"LEDGER_OIDC_ROLES": ""}, "LEDGER_OIDC_ROLES is required"),
        ({"LEDGER_OIDC_ROLES": "{ledger-ops: operator}"}, "not valid JSON"),
        ({"LEDGER_OIDC_ROLES": '["operator"]'}, "must be a JSON object"),
        ({"LEDGER_OIDC_ROLES": '{"ops": "superhero"}'}, "which is none of operator"),
        ({"LEDGER_OIDC_ISSUER": "http://login.example.com"}, "must use https"),
        ({"LEDGER_OIDC_ISSUER": "login.example.com"}, "must be an http(s) URL"),
        ({"LEDGER_OIDC_TOKEN_ENDPOINT": "ftp://x/token"}, "must be an http(s) URL"),
        ({"LEDGER_OIDC_SIGN_ALGO": "HS256"}, "LEDGER_OIDC_SIGN_ALGO must be one of"),
        ({"LEDGER_OIDC_SCOPES": "email profile"}, "must include openid"),
        ({"LEDGER_OIDC_REFRESH_SECONDS": "soon"}, "whole number of seconds"),
        ({"LEDGER_OIDC_REFRESH_SECONDS": "0"}, "at least 1"),
        ({"LEDGER_LOCAL_LOGIN": "perhaps"}, "LEDGER_LOCAL_LOGIN must be true or false"),
    ],
)
def test_a_mistake_is_named(change, words):
    with pytest.raises(ImproperlyConfigured, match=words.replace("(", r"\(").replace(")", r"\)")):
        django_settings({**GOOD, **change})


def test_local_login_off_needs_single_sign_on():
    with pytest.raises(ImproperlyConfigured, match="otherwise nobody could sign in"):
        django_settings({"LEDGER_LOCAL_LOGIN": "false"})
    assert django_settings({**GOOD, "LEDGER_LOCAL_LOGIN": "false"})["LEDGER_LOCAL_LOGIN"] is False


def test_plain_http_is_accepted_on_loopback_only():
    assert read({**GOOD, "LEDGER_OIDC_ISSUER": "http://localhost:8080/o"}) is not None


def test_a_bad_configuration_stops_the_process_at_start():
    env = {**os.environ, **GOOD, "LEDGER_OIDC_ROLES": '{"ops": "root"}'}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "Single sign-on: LEDGER_OIDC_ROLES maps 'ops' to 'root'" in result.stderr
