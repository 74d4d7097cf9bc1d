"""The limits page: each tool's declared limits and how much of them is used."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseNotFound


def limits(request: HttpRequest) -> HttpResponse:
    return HttpResponseNotFound()
