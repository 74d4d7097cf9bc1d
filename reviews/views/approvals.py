"""The approvals page: what waits for a second operator (four-eyes)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseNotFound


def approvals(request: HttpRequest) -> HttpResponse:
    return HttpResponseNotFound()
