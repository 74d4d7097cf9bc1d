"""Single sign-on's settings, read from the environment once, at start (`config/settings.py`).

No `LEDGER_OIDC_*` variable set: no single sign-on, and the pages sign in with local accounts
only, as they always did. `LEDGER_OIDC_ISSUER` turns it on; then the client's id and secret and
a role mapping are required, and every value is checked here, so that a mistake stops the
process at start with one clear line instead of failing a person's sign-in later.

This module imports nothing of Django's but the exception: the settings import it before apps
are ready.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

PREFIX = "LEDGER_OIDC_"
ROLES = ("operator", "auditor", "admin")
# Only asymmetric signatures: with HS256 anyone holding the client secret could mint tokens.
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256")
ENDPOINTS = ("authorization", "token", "userinfo", "jwks", "end_session")
LOOPBACK = ("localhost", "127.0.0.1", "[::1]", "::1")


@dataclass(frozen=True)
class SsoConfig:
    """What the ledger needs to know about its identity provider."""

    issuer: str
    client_id: str
    client_secret: str
    # Role claim values → ledger roles ({"ledger-ops": "operator"}).
    roles: dict[str, str]
    role_claim: str = "groups"
    # The claim naming the person's teams; "" leaves teams to the admins.
    team_claim: str = ""
    scopes: str = "openid profile email"
    algorithm: str = "RS256"
    # Explicit endpoints; those left empty are read from the issuer's discovery document.
    endpoints: dict[str, str] = field(default_factory=dict)
    # How long a sign-in holds before the provider is asked again (seconds).
    refresh_seconds: int = 300
    # Clock skew allowed on the ID token's times (seconds).
    leeway: int = 60
    # How long a call to the provider may take (seconds).
    timeout: int = 5
    # The sign-in button's words: "Sign in with <label>".
    label: str = "single sign-on"

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def _fail(message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"Single sign-on: {message}")


def _url(name: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise _fail(f"{name} must be an http(s) URL, not {value!r}.")
    # Tokens and secrets travel over these: plain http only on this machine (tests, demos).
    if parts.scheme == "http" and parts.hostname not in LOOPBACK:
        raise _fail(f"{name} must use https (plain http is accepted for loopback only).")
    return value


def _int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _fail(f"{name} must be a whole number of seconds, not {raw!r}.") from None
    if value < minimum:
        raise _fail(f"{name} must be at least {minimum}.")
    return value


def _roles(raw: str) -> dict[str, str]:
    name = PREFIX + "ROLES"
    if not raw.strip():
        raise _fail(f'{name} is required, as JSON: {{"ledger-ops": "operator", ...}}.')
    try:
        mapping = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _fail(f"{name} is not valid JSON ({exc.msg}).") from None
    if not isinstance(mapping, dict) or not mapping:
        raise _fail(f'{name} must be a JSON object: {{"ledger-ops": "operator", ...}}.')
    for value, role in mapping.items():
        if role not in ROLES:
            raise _fail(f"{name} maps {value!r} to {role!r}, which is none of {', '.join(ROLES)}.")
    return {str(k): str(v) for k, v in mapping.items()}


def _endpoints(env: Mapping[str, str]) -> dict[str, str]:
    found = {}
    for endpoint in ENDPOINTS:
        name = f"{PREFIX}{endpoint.upper()}_ENDPOINT" if endpoint != "jwks" else PREFIX + "JWKS_URI"
        value = env.get(name, "").strip()
        if value:
            found[endpoint] = _url(name, value)
    return found


def read(env: Mapping[str, str]) -> SsoConfig | None:
    """The configuration the environment describes, or None when single sign-on is off."""
    if not any(name.startswith(PREFIX) and value.strip() for name, value in env.items()):
        return None
    issuer = env.get(PREFIX + "ISSUER", "").strip()
    if not issuer:
        raise _fail(f"{PREFIX}ISSUER is required once any {PREFIX}* variable is set.")
    _url(PREFIX + "ISSUER", issuer)
    client_id = env.get(PREFIX + "CLIENT_ID", "").strip()
    secret = env.get(PREFIX + "CLIENT_SECRET", "").strip()
    if not client_id or not secret:
        raise _fail(f"{PREFIX}CLIENT_ID and {PREFIX}CLIENT_SECRET are required.")
    algorithm = env.get(PREFIX + "SIGN_ALGO", "").strip() or "RS256"
    if algorithm not in ALGORITHMS:
        raise _fail(f"{PREFIX}SIGN_ALGO must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}.")
    scopes = env.get(PREFIX + "SCOPES", "").strip() or "openid profile email"
    if "openid" not in scopes.split():
        raise _fail(f"{PREFIX}SCOPES must include openid.")
    return SsoConfig(
        issuer=issuer,
        client_id=client_id,
        client_secret=secret,
        roles=_roles(env.get(PREFIX + "ROLES", "")),
        role_claim=env.get(PREFIX + "ROLE_CLAIM", "").strip() or "groups",
        team_claim=env.get(PREFIX + "TEAM_CLAIM", "").strip(),
        scopes=scopes,
        algorithm=algorithm,
        endpoints=_endpoints(env),
        refresh_seconds=_int(env, PREFIX + "REFRESH_SECONDS", 300, 1),
        leeway=_int(env, PREFIX + "LEEWAY_SECONDS", 60, 0),
        timeout=_int(env, PREFIX + "TIMEOUT_SECONDS", 5, 1),
        label=env.get(PREFIX + "LABEL", "").strip() or "single sign-on",
    )


def local_login(env: Mapping[str, str], sso: SsoConfig | None) -> bool:
    """`LEDGER_LOCAL_LOGIN`: whether local accounts may sign in with a password."""
    raw = env.get("LEDGER_LOCAL_LOGIN", "").strip().lower()
    if raw in ("", "1", "true", "yes", "on"):
        return True
    if raw not in ("0", "false", "no", "off"):
        raise ImproperlyConfigured(f"LEDGER_LOCAL_LOGIN must be true or false, not {raw!r}.")
    if sso is None:
        raise ImproperlyConfigured(
            "LEDGER_LOCAL_LOGIN=false needs single sign-on (LEDGER_OIDC_ISSUER and the rest): "
            "otherwise nobody could sign in."
        )
    return False


def django_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The Django settings single sign-on sets: ours and mozilla-django-oidc's."""
    sso = read(env)
    return {
        "LEDGER_SSO": sso,
        "LEDGER_LOCAL_LOGIN": local_login(env, sso),
        "OIDC_RP_CLIENT_ID": sso.client_id if sso else "",
        "OIDC_RP_CLIENT_SECRET": sso.client_secret if sso else "",
        "OIDC_RP_SCOPES": sso.scopes if sso else "openid",
        "OIDC_RP_SIGN_ALGO": sso.algorithm if sso else "RS256",
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": sso.refresh_seconds if sso else 300,
        "OIDC_TIMEOUT": sso.timeout if sso else 5,
        # The ID token is kept for the provider's sign-out (id_token_hint).
        "OIDC_STORE_ID_TOKEN": True,
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": True,
        "OIDC_OP_LOGOUT_URL_METHOD": "reviews.sso.views.provider_logout_url",
        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_authentication_callback",
    }
