"""Responses for someone who is signed in are never stored by a browser or a proxy."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import add_never_cache_headers


def no_store_when_signed_in(
    get_response: Callable[[HttpRequest], HttpResponseBase],
) -> Callable[[HttpRequest], HttpResponseBase]:
    """`Cache-Control: no-store` (with Django's other never-cache headers) on every response to
    a signed-in person, pages, htmx partials, exports and admin alike, and to an agent that
    authenticated with its key: the back button of a shared computer or a caching proxy must
    not hand the ledger to the next person. One middleware, so a new view cannot forget it."""

    def middleware(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        # Read after the view: a sign-in or sign-out in this request has changed the user.
        agent = getattr(request, "agent", None)
        user = getattr(request, "user", None)  # none on /api/ (config.pagemiddleware)
        if agent is not None or (user is not None and user.is_authenticated):
            add_never_cache_headers(response)
        return response

    return middleware
