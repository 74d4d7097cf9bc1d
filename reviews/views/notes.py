"""Notes on review items, releasing a claim, and the effect page's live check."""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse, HttpResponseNotFound


def add(request: HttpRequest, item_id: int) -> HttpResponse:
    return HttpResponseNotFound()


def release(request: HttpRequest, item_id: int) -> HttpResponse:
    return HttpResponseNotFound()


def live(request: HttpRequest, effect_id: uuid.UUID) -> HttpResponse:
    return HttpResponseNotFound()
