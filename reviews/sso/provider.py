"""The identity provider as the ledger sees it: its endpoints, its keys, and the checks an ID
token must pass before anything in it is believed.

mozilla-django-oidc checks the signature and the expiry only; the audience and the issuer are
checked here too, and the signing algorithm is pinned to the configured one (ADR 0013).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings

from reviews.sso.config import SsoConfig

# How long a discovery document or a key set is reused before it is read again (seconds).
CACHE_FOR = 3600
_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_lock = threading.Lock()


class SsoRefused(Exception):
    """A sign-in refused, with the words the person is shown and the HTTP status."""

    def __init__(self, message: str, *, status: int = 403, reason: str = "refused") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class ProviderUnavailable(SsoRefused):
    def __init__(self, what: str) -> None:
        super().__init__(
            f"The identity provider could not be reached or answered unexpectedly ({what}). "
            "Try again in a moment; if it persists, tell your administrator.",
            status=502,
            reason="provider",
        )


def current() -> SsoConfig | None:
    """The configuration in force (None: single sign-on is off)."""
    return getattr(settings, "LEDGER_SSO", None)


def _get_json(url: str, config: SsoConfig, *, fresh: bool = False) -> dict[str, Any]:
    now = time.monotonic()
    with _lock:
        cached = _cache.get(url)
    if cached and not fresh and now - cached[0] < CACHE_FOR:
        return cached[1]
    try:
        response = requests.get(url, timeout=config.timeout)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {type(exc).__name__}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url}: not a JSON object")
    with _lock:
        _cache[url] = (now, document)
    return document


def endpoint(config: SsoConfig, name: str, *, fetch: bool = True) -> str:
    """An endpoint ("authorization", "token", "userinfo", "jwks", "end_session"): as configured,
    or from the issuer's discovery document. "" when the provider has none (end_session), or,
    with `fetch` false, when the document has not been read yet."""
    if name in config.endpoints:
        return config.endpoints[name]
    key = "jwks_uri" if name == "jwks" else f"{name}_endpoint"
    if not fetch:
        with _lock:
            cached = _cache.get(config.discovery_url)
        return str(cached[1].get(key, "")) if cached else ""
    value = _get_json(config.discovery_url, config).get(key, "")
    if not value and name != "end_session":
        raise ProviderUnavailable(f"its discovery document names no {key}")
    return str(value)


def signing_key(config: SsoConfig, token: str) -> Any:
    """The provider's public key that signed `token` (by its kid), read again once when the
    kid is unknown, as after a key rotation."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise SsoRefused(
            "The identity provider's ID token is malformed.", reason="malformed"
        ) from None
    if header.get("alg") != config.algorithm:
        raise SsoRefused(
            f"The ID token is signed with {header.get('alg')!r}, not {config.algorithm}.",
            reason="algorithm",
        )
    url = endpoint(config, "jwks")
    for fresh in (False, True):
        for jwk in _get_json(url, config, fresh=fresh).get("keys", []):
            if header.get("kid") and jwk.get("kid") != header["kid"]:
                continue
            if (
                jwk.get("alg", config.algorithm) != config.algorithm
                or jwk.get("use", "sig") != "sig"
            ):
                continue
            try:
                return jwt.PyJWK(jwk).key
            except jwt.PyJWTError:
                continue
    raise SsoRefused("No key of the identity provider matches the ID token's.", reason="key")


# PyJWT's refusals, in the words a person is shown.
REFUSALS: list[tuple[type[Exception], str, str]] = [
    (jwt.ExpiredSignatureError, "expired", "The ID token has expired."),
    (jwt.InvalidAudienceError, "audience", "The ID token was issued for another application."),
    (jwt.InvalidIssuerError, "issuer", "The ID token comes from another issuer."),
    (jwt.ImmatureSignatureError, "not_yet_valid", "The ID token is not valid yet."),
    (jwt.InvalidSignatureError, "signature", "The ID token's signature does not verify."),
    (jwt.MissingRequiredClaimError, "claims", "The ID token lacks a required claim."),
    (jwt.PyJWTError, "invalid", "The ID token is invalid."),
]


def verify_id_token(config: SsoConfig, token: str, nonce: str | None) -> dict[str, Any]:
    """The ID token's claims, once its signature, algorithm, issuer, audience, times and nonce
    hold; `SsoRefused` naming the first that does not."""
    if not isinstance(token, str) or not token:
        raise SsoRefused("The identity provider sent no ID token.", reason="malformed")
    key = signing_key(config, token)
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[config.algorithm],
            audience=config.client_id,
            issuer=config.issuer,
            leeway=config.leeway,
            options={"require": ["iss", "sub", "aud", "exp", "iat"]},
        )
    except jwt.PyJWTError as exc:
        reason, words = next((r, w) for kind, r, w in REFUSALS if isinstance(exc, kind))
        raise SsoRefused(f"Sign-in refused: {words}", reason=reason) from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != config.client_id:
        raise SsoRefused(
            "Sign-in refused: The ID token was issued for another application.", reason="audience"
        )
    if nonce is not None and claims.get("nonce") != nonce:
        raise SsoRefused("Sign-in refused: the ID token answers another sign-in.", reason="nonce")
    return claims
