"""The limits page: each tool's and agent's declared limits, how much of them the current window
has used, what is left, and the claims refused lately (`reviews.records.limits`). Read-only for
every reader."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from reviews.access.checks import reader
from reviews.records.limits import recent_refusals, usages

RECENT_REFUSALS = 20


@require_GET
@reader
def limits(request: HttpRequest) -> HttpResponse:
    # Only the limits and refusals of the person's teams' tools and agents (ADR 0014).
    context = {
        "usages": usages(request.user),
        "refusals": recent_refusals(request.user, RECENT_REFUSALS),
    }
    return render(request, "reviews/limits.html", context)
