"""Many review items at once: bulk assignment and decisions, and saved queue filters."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseNotFound


def start(request: HttpRequest) -> HttpResponse:
    return HttpResponseNotFound()


def progress(request: HttpRequest, job_id: int) -> HttpResponse:
    return HttpResponseNotFound()


def save_filter(request: HttpRequest) -> HttpResponse:
    return HttpResponseNotFound()


def delete_filter(request: HttpRequest, filter_id: int) -> HttpResponse:
    return HttpResponseNotFound()
