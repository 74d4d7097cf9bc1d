"""The approvals page: what waits for a second operator (four-eyes, `reviews.decisions.approvals`),
read by `reviews.decisions.waiting`.

Each row says who asked, since when and for how much, and links to the effect page where another
operator decides; it says when the viewer is the one who asked, since
`reviews.decisions.approvals.check_second_pair` will refuse them.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from reviews.access.checks import reader
from reviews.decisions.waiting import waiting

# More than this many waiting is an incident of its own; the page says how many it leaves out.
SHOWN = 200


@require_GET
@reader
def approvals(request: HttpRequest) -> HttpResponse:
    # Only the teams' effects the person sees (ADR 0014).
    rows, more = waiting(request.user, SHOWN)
    return render(request, "reviews/approvals.html", {"waiting": rows, "more": more})
