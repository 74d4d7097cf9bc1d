"""Short sessions: an SSO sign-in holds for `LEDGER_OIDC_REFRESH_SECONDS`, then the provider is
asked again, so a person removed there loses access here within that interval.

As mozilla-django-oidc's `SessionRefresh` does, a page load past the interval goes through the
provider with `prompt=none`: a person still signed in there comes straight back (roles and
teams applied again by the callback), anyone else is signed out. Unlike it, nothing is let
through meanwhile: an htmx request is answered 401 with `HX-Redirect` to the page it came from,
so the page reloads and renews itself instead of swapping a login page into a fragment (an
htmx request that the login page would answer, once the session is gone, is told the same), and
any other request that is not a page load (a form's POST) is answered 401 with a page that says
so, and is not carried out. The configuration is read per request.

The page to come back to after the round trip is kept only when it is a path on this site
(`reviews.sso.views.local_return`): a link to `//evil.example/`, `/%2F%2Fevil.example/` or
`/\\evil.example` comes back to the overview, never elsewhere; the callback checks it again.

Also, while single sign-on is on, every page's Content-Security-Policy lets forms lead to the
provider (`form-action`): signing out is a form whose answer redirects there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import quote, urlencode, urlsplit

from django.contrib.auth import BACKEND_SESSION_KEY
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.crypto import get_random_string
from django.utils.http import url_has_allowed_host_and_scheme
from mozilla_django_oidc.utils import (
    add_state_and_verifier_and_nonce_to_session,
    generate_code_challenge,
)

from reviews.sso.config import SsoConfig
from reviews.sso.provider import SsoRefused, current, endpoint
from reviews.sso.views import BACKEND, local_return

Handler = Callable[[HttpRequest], HttpResponseBase]
# Where a lapsed session may still go: the round trip itself and signing out.
EXEMPT = ("/oidc/", "/logout/", "/login/")


def _lapsed(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or request.path.startswith(EXEMPT):
        return False
    if request.session.get(BACKEND_SESSION_KEY) != BACKEND:
        return False
    return request.session.get("oidc_id_token_expiration", 0) <= time.time()


def renewal_url(request: HttpRequest, config: SsoConfig) -> str:
    """The provider's authorization endpoint, asked not to show anything (prompt=none)."""
    state = get_random_string(32)
    verifier = get_random_string(64)
    params = {
        "response_type": "code",
        "client_id": config.client_id,
        "redirect_uri": request.build_absolute_uri(reverse("oidc_authentication_callback")),
        "state": state,
        "scope": config.scopes,
        "prompt": "none",
        "nonce": get_random_string(32),
        "code_challenge": generate_code_challenge(verifier, "S256"),
        "code_challenge_method": "S256",
    }
    add_state_and_verifier_and_nonce_to_session(request, state, params, verifier)
    request.session["oidc_login_next"] = local_return(request, request.get_full_path())
    return f"{endpoint(config, 'authorization')}?{urlencode(params, quote_via=quote)}"


def _back_to(request: HttpRequest) -> str:
    """The page an htmx request came from (HX-Current-URL), if it is one of ours."""
    url = request.headers.get("HX-Current-URL", "")
    if url and url_has_allowed_host_and_scheme(url, {request.get_host()}):
        return url
    return reverse("overview")


def renew(request: HttpRequest, config: SsoConfig) -> HttpResponseBase:
    if request.headers.get("HX-Request") == "true":
        response = HttpResponse("Your session must be renewed.", status=401)
        response["HX-Redirect"] = _back_to(request)
        return response
    if request.method not in ("GET", "HEAD"):
        return render(request, "registration/sso_renew.html", status=401)
    try:
        return HttpResponseRedirect(renewal_url(request, config))
    except SsoRefused as exc:
        from reviews.sso.views import refused

        return refused(request, exc)


def _provider_origins(config: SsoConfig) -> list[str]:
    """The provider's origins that forms may lead to: the issuer's, and those of its endpoints
    (as configured, or as its discovery document said, never read here)."""
    origins = set()
    for name in ("issuer", "authorization", "end_session"):
        url = config.issuer if name == "issuer" else endpoint(config, name, fetch=False)
        if url:
            parts = urlsplit(url)
            origins.add(f"{parts.scheme}://{parts.netloc}")
    return sorted(origins)


def _sign_in_again(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """An htmx request sent to the login page (the session ended: signed out at the provider,
    in another tab) is told to take the whole page there, not to swap the login page in."""
    if request.headers.get("HX-Request") != "true" or response.status_code != 302:
        return response
    location = response.get("Location", "")
    if not location.startswith(reverse("login")):
        return response
    answer = HttpResponse("Sign in again.", status=401)
    answer["HX-Redirect"] = f"{reverse('login')}?{urlencode({'next': _back_path(request)})}"
    return answer


def _back_path(request: HttpRequest) -> str:
    parts = urlsplit(_back_to(request))
    return parts.path + (f"?{parts.query}" if parts.query else "")


class SsoSessions:
    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        config = current()
        if config is None:
            return self.get_response(request)
        response = renew(request, config) if _lapsed(request) else self.get_response(request)
        response = _sign_in_again(request, response)
        origins = _provider_origins(config)
        if origins:
            update = dict(getattr(response, "_csp_update", None) or {})
            update["form-action"] = [*update.get("form-action", []), *origins]
            response._csp_update = update  # type: ignore[attr-defined]
        return response
