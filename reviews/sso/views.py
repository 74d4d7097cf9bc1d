"""Signing in and out: the login page (local and SSO), the provider's round trip, sign-out.

mozilla-django-oidc's views carry the protocol (state, nonce, PKCE, the code exchange); these
subclasses read the configuration per request, answer 404 while single sign-on is off, and turn
every refusal into a page that says what happened (`registration/sso_refused.html`), never a
500 and never a session.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote, urlencode

import requests
from django.conf import settings
from django.contrib import auth, messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
    OIDCLogoutView,
)

from reviews.sso.backends import ProviderBackend
from reviews.sso.provider import SsoRefused, current, endpoint

log = logging.getLogger(__name__)
BACKEND = f"{ProviderBackend.__module__}.{ProviderBackend.__qualname__}"


def refused(request: HttpRequest, error: SsoRefused, *, sign_out: bool = True) -> HttpResponse:
    """The page for a refused sign-in: what happened, and no session (`sign_out`: a session
    this sign-in would have renewed ends too)."""
    if sign_out and request.user.is_authenticated:
        auth.logout(request)
    log.warning("sign-in through the identity provider refused: %s", error.reason)
    context = {"message": error.message, "reason": error.reason}
    return render(request, "registration/sso_refused.html", context, status=error.status)


def local_return(request: HttpRequest, url: str | None) -> str:
    """`url` when it stays on this site, else the overview: Django's
    `url_has_allowed_host_and_scheme` for the request's host (HTTPS required on a secure
    request) must accept it both as it is and decoded once, so that `//host`, `/\\host` and
    their percent-encoded forms never lead away, whoever decodes them."""
    if url:
        safe = {"allowed_hosts": {request.get_host()}, "require_https": request.is_secure()}
        if url_has_allowed_host_and_scheme(url, **safe) and url_has_allowed_host_and_scheme(
            unquote(url), **safe
        ):
            return url
    return reverse("overview")


class SignInView(auth_views.LoginView):
    """The login page: the password form unless local sign-in is off, and the SSO button when
    single sign-on is on."""

    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        config = current()
        context["sso_label"] = config.label if config else ""
        context["local_login"] = settings.LEDGER_LOCAL_LOGIN
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.LEDGER_LOCAL_LOGIN:
            return refused(
                request,
                SsoRefused(
                    "Signing in with a password is turned off here: sign in with "
                    f"{current().label if current() else 'single sign-on'}.",
                    reason="local_off",
                ),
                sign_out=False,
            )
        return super().post(request, *args, **kwargs)


class SsoStart(OIDCAuthenticationRequestView):
    """To the provider's authorization endpoint, with state, nonce and PKCE kept in the
    session."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:  # type: ignore[override]
        config = current()
        if config is None:
            raise Http404("Single sign-on is not configured.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = endpoint(config, "authorization")
        except SsoRefused as exc:
            return refused(request, exc)
        self.OIDC_RP_CLIENT_ID = config.client_id
        return super().get(request)


class SsoCallback(OIDCAuthenticationCallbackView):
    """The provider's answer: the code exchanged, the ID token checked, the account bound."""

    @property
    def failure_url(self) -> str:
        return reverse("login")

    @property
    def success_url(self) -> str:
        """The return address kept in the session, checked again here: one stored by an older
        process, or by anything else, never leads off the site."""
        return local_return(self.request, self.request.session.get("oidc_login_next"))

    def get(self, request: HttpRequest) -> HttpResponse:  # type: ignore[override]
        if current() is None:
            raise Http404("Single sign-on is not configured.")
        if request.GET.get("error"):
            return self.provider_error(request)
        try:
            response = super().get(request)
        except SsoRefused as exc:
            return refused(request, exc)
        except SuspiciousOperation:
            return refused(
                request,
                SsoRefused(
                    "This answer from the identity provider belongs to no sign-in started "
                    "here (it may have been used already). Sign in again.",
                    status=400,
                    reason="state",
                ),
            )
        except requests.RequestException as exc:
            return refused(request, SsoRefused(_provider_words(exc), status=502, reason="provider"))
        if not request.user.is_authenticated:
            return refused(request, SsoRefused("The sign-in did not complete.", reason="failed"))
        return response

    def provider_error(self, request: HttpRequest) -> HttpResponse:
        """The provider refused (for a renewal with prompt=none: the person is no longer signed
        in there, or was removed): the session here ends too."""
        super().get(request)  # drops the state and signs out
        error = request.GET.get("error", "")[:100]
        messages.warning(
            request,
            f"The identity provider did not sign you in ({error}). Sign in again to continue.",
        )
        return HttpResponseRedirect(reverse("login"))


def _provider_words(exc: requests.RequestException) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    what = f"HTTP {status}" if status else type(exc).__name__
    return (
        f"The identity provider refused to complete the sign-in ({what}). Sign in again; if it "
        "persists, tell your administrator."
    )


def provider_logout_url(request: HttpRequest) -> str:
    """Where sign-out goes: the provider's end-session endpoint (RP-initiated logout) for an
    SSO session when the provider has one, the login page otherwise."""
    login = reverse("login")
    config = current()
    if config is None or request.session.get(auth.BACKEND_SESSION_KEY) != BACKEND:
        return login
    try:
        end_session = endpoint(config, "end_session")
    except SsoRefused:
        end_session = ""
    if not end_session:
        return login
    params = {
        "client_id": config.client_id,
        "post_logout_redirect_uri": request.build_absolute_uri(login),
    }
    id_token = request.session.get("oidc_id_token")
    if id_token:
        params["id_token_hint"] = id_token
    separator = "&" if "?" in end_session else "?"
    return f"{end_session}{separator}{urlencode(params)}"


class SignOutView(OIDCLogoutView):
    """POST only, as Django's: ends the session here and, for an SSO session, at the
    provider."""

    http_method_names = ["post"]
