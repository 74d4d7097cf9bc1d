"""The review queue: open items, filtered, sorted and paged; claim and assign in place."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger.models import Incident, ReviewItem
from reviews.access import actor, reader
from reviews.filters import QueueFilter, operators
from reviews.queue import assign_item, claim_item, open_page, page_number, rows


@require_GET
@reader
def queue(request: HttpRequest) -> HttpResponse:
    filters = QueueFilter(request.GET, queryset=ReviewItem.objects.all(), user=request.user)
    if not filters.is_valid():
        return render(request, "reviews/queue.html", {"filters": filters, "page": None}, status=400)
    page = open_page(filters.qs, page_number(request.GET.get("page")))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "filters": filters,
        "page": page,
        "query": query.urlencode(),
        "back": request.get_full_path(),  # where a claim or assignment without htmx returns
        "operators": list(operators().values_list("id", "username")),
        "resolve_hours": settings.LEDGER_RESOLVE_WITHIN // 3600,
        # The incidents' place in the queue: a count over incident_open_idx, and a link.
        "open_incidents": Incident.objects.filter(acknowledged_at__isnull=True).count(),
    }
    template = "reviews/queue.html#results" if request.htmx else "reviews/queue.html"
    return render(request, template, context)


def _row(request: HttpRequest, item: ReviewItem, note: str = "") -> HttpResponse:
    """htmx gets the updated row; a plain form post goes back to the queue."""
    if request.htmx:
        shown = rows([item.pk])
        context = {
            "item": shown[0],
            "note": note,
            "back": request.POST.get("next", ""),
            "operators": list(operators().values_list("id", "username")),
        }
        return render(request, "reviews/queue.html#row", context)
    if note:
        messages.warning(request, note)
    target = request.POST.get("next", "")
    return redirect(target if target.startswith("/queue/") else reverse("queue"))


@require_POST
@actor
def claim(request: HttpRequest, item_id: int) -> HttpResponse:
    item = get_object_or_404(ReviewItem, pk=item_id)
    taken_by = claim_item(item, request.user)
    note = "" if taken_by == request.user else f"Already claimed by {taken_by}."
    return _row(request, item, note)


@require_POST
@actor
def assign(request: HttpRequest, item_id: int) -> HttpResponse:
    item = get_object_or_404(ReviewItem, pk=item_id)
    try:
        assignee_id = int(request.POST.get("assignee", ""))
    except ValueError:
        return HttpResponseBadRequest("Choose an operator to assign.")
    assignee = operators().filter(pk=assignee_id).first()
    if not isinstance(assignee, User):
        return HttpResponseBadRequest("That user cannot be assigned review items.")
    note = "" if assign_item(item, assignee) else "This item was resolved meanwhile."
    return _row(request, item, note)
