"""The API's outer edge: body size, and JSON for errors that happen before a view runs."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from ledger.restore import incarnation

# Pinned: log pipelines filter on the name this module had before the ledger's subpackages.
log = logging.getLogger("ledger.middleware")

API_PREFIX = "/api/"
_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    400: "malformed_json",
    403: "forbidden",
}


# How long a client should wait before repeating a request the database could not serve.
RETRY_AFTER_SECONDS = 1


def _error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": code, "detail": detail}, status=status)


def unavailable(exc: Exception) -> JsonResponse:
    """The 503 for a database that cannot be reached. Nothing was committed, so the client may
    repeat the same request (the ledger's repeats make that safe) after `Retry-After`."""
    log.warning("database unavailable: %s", exc)
    response = _error(503, "unavailable", "The database is not reachable; retry shortly.")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class ApiBoundaryMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PREFIX):
            return self.get_response(request)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _error(400, "malformed_json", "The Content-Length header is not a number.")
        if length > settings.LEDGER_MAX_BODY_BYTES:
            return _error(
                413,
                "body_too_large",
                f"The body is larger than {settings.LEDGER_MAX_BODY_BYTES} bytes.",
            )
        if "\x00" in request.path or any(
            "\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()
        ):
            # PostgreSQL cannot store or compare text holding NUL.
            return JsonResponse(
                {
                    "error": "validation_error",
                    "detail": "The URL contains a NUL character.",
                    "fields": {"url": "contains a NUL character"},
                },
                status=422,
            )
        try:
            if "HTTP_AUTHORIZATION" in request.META:  # an agent's call, which may write
                incarnation.check_if_moved()  # a failover or restore under us: witness first
            response = self.get_response(request)
        except (OperationalError, InterfaceError) as exc:
            return unavailable(exc)
        if response.status_code in _CODES and not response.get("Content-Type", "").startswith(
            "application/json"
        ):
            replaced = _error(response.status_code, _CODES[response.status_code], _detail(response))
            if response.status_code == 405 and response.has_header("Allow"):
                # RFC 9110: a 405 names the methods the path accepts.
                allowed = sorted(m.strip() for m in response["Allow"].split(",") if m.strip())
                replaced["Allow"] = ", ".join(allowed)
            return replaced
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not request.path.startswith(API_PREFIX):
            return None
        if isinstance(exception, (OperationalError, InterfaceError)):
            return unavailable(exception)
        if isinstance(exception, (Http404, PermissionDenied, SuspiciousOperation)):
            # Django answers these itself (404, 403, 400); `__call__` then gives them JSON.
            return None
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _error(500, "internal_error", "An unexpected error occurred; it has been logged.")


def _detail(response: HttpResponse) -> str:
    if response.status_code == 404:
        return "No such resource."
    if response.status_code == 405:
        return "This method is not allowed here."
    try:
        return str(json.loads(response.content).get("detail", "Bad request."))
    except ValueError:
        return "Bad request."
