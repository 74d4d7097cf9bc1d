"""What recovery will do for a run: the API's dry run, as a page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseNotFound


def preview(request: HttpRequest) -> HttpResponse:
    return HttpResponseNotFound()
