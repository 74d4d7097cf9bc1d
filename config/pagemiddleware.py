"""The middleware only people's pages need, skipped for the agent API.

Sessions, the signed-in user, messages, static files, the page headers (CSP, X-Frame-Options)
and htmx serve the operator pages, the admin and the API's docs page. An agent call (`/api/…`)
authenticates with its key, has no cookie and answers JSON, yet each of them would still run
for it on every call: `PagesOnly` runs the chain in `PAGE_MIDDLEWARE` (settings) for every other
path, and hands an agent call straight to the rest of `MIDDLEWARE`. The wrapped middleware may
only use `__call__`, `process_request` and `process_response` (Django calls the `process_view`
and `process_exception` hooks of the top-level list alone); CSRF and axes, which use more, stay
in `MIDDLEWARE`.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.module_loading import import_string

from ledger.api.middleware import API_PREFIX

# Pages under the API's prefix: the docs (Swagger UI) and the schema they load.
API_PAGES = ("/api/v1/docs", "/api/v1/openapi.json")

Handler = Callable[[HttpRequest], HttpResponseBase]


class PagesOnly:
    def __init__(self, get_response: Handler) -> None:
        self.api = get_response
        pages = get_response
        for path in reversed(settings.PAGE_MIDDLEWARE):
            pages = import_string(path)(pages)
        self.pages = pages

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        path = request.path
        if path.startswith(API_PREFIX) and not path.startswith(API_PAGES):
            return self.api(request)
        return self.pages(request)
