"""The middleware only people's pages need, skipped for the agent API.

Sessions, the signed-in user and messages serve the operator pages and the admin. An agent call
(`/api/…`) authenticates with its key and has no cookie, yet each of them would still run for
it: `PagesOnly` runs the chain in `PAGE_MIDDLEWARE` (settings) for every other path and hands an
API request straight to the rest of `MIDDLEWARE`. The wrapped middleware may only use
`process_request` / `process_response` (Django calls `process_view` and `process_exception`
hooks of the top-level list alone); sessions, authentication and messages use nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.module_loading import import_string

from ledger.middleware import API_PREFIX

Handler = Callable[[HttpRequest], HttpResponseBase]


class PagesOnly:
    def __init__(self, get_response: Handler) -> None:
        self.api = get_response
        pages = get_response
        for path in reversed(settings.PAGE_MIDDLEWARE):
            pages = import_string(path)(pages)
        self.pages = pages

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path.startswith(API_PREFIX):
            return self.api(request)
        return self.pages(request)
