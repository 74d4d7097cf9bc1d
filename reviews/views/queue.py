"""The review queue: open items, filtered, searched, sorted and paged; hold and assign in place;
a live refresh that swaps the rows only when they changed."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ledger.models import ReviewItem
from reviews.access.checks import actor, reader
from reviews.access.teams import item_or_404
from reviews.decisions.kinds import KINDS as DECLARED
from reviews.queue.bulk import INLINE_LIMIT, KINDS
from reviews.queue.filters import assignable, assignee_numbered, queue_filter
from reviews.queue.holds import assign_item, hold_item
from reviews.queue.pages import (
    dress,
    fingerprint,
    open_page,
    page_number,
    rows,
    unlisted,
)
from reviews.queue.saved import saved_filters
from reviews.records import incidents


@require_GET
@reader
def queue(request: HttpRequest) -> HttpResponse:
    # Only the items of effects the person may see (their teams', ADR 0014).
    filters = queue_filter(request.GET, request.user)
    if not filters.is_valid():
        return render(request, "reviews/queue.html", {"filters": filters, "page": None}, status=400)
    page = open_page(filters.qs, page_number(request.GET.get("page")))
    seen = fingerprint(page)
    # The page's live poll (hx-trigger every few seconds) names what it shows; nothing changed
    # means nothing to swap, so the operator's selection and focus stay as they are.
    if request.htmx and request.GET.get("live") == seen:
        return HttpResponse(status=204)
    dress(page.items)
    shown = request.GET.copy()
    shown.pop("live", None)
    query = shown.copy()
    query.pop("page", None)
    searched = filters.form.cleaned_data.get("q") or ""
    context = {
        "filters": filters,
        "page": page,
        "query": query.urlencode(),
        "fingerprint": seen,
        "updated": timezone.localtime(),
        # Where a hold or assignment without htmx returns: this page, as the address shows it.
        "back": f"{request.path}?{shown.urlencode()}",
        "operators": assignable(request.user),
        "resolve_hours": settings.LEDGER_RESOLVE_WITHIN // 3600,
        # The incidents' place in the queue: a count over incident_open_idx, and a link.
        "open_incidents": incidents.open_count(request.user),
        "unlisted": unlisted(filters.qs, searched, request.user) if searched.strip() else [],
        "saved_filters": saved_filters(request.user),
        "bulk_kinds": [(action, DECLARED[action].label) for action in KINDS],
        "inline_limit": INLINE_LIMIT,
    }
    template = "reviews/queue.html#results" if request.htmx else "reviews/queue.html"
    return render(request, template, context)


def _row(request: HttpRequest, item: ReviewItem, note: str = "") -> HttpResponse:
    """htmx gets the updated row; a plain form post goes back to the queue."""
    if request.htmx:
        shown = rows([item.pk])
        dress(shown)
        context = {
            "item": shown[0],
            "note": note,
            "back": request.POST.get("next", ""),
            "operators": assignable(request.user),
        }
        return render(request, "reviews/queue.html#row", context)
    if note:
        messages.warning(request, note)
    target = request.POST.get("next", "")
    return redirect(target if target.startswith(("/queue/", "/effects/")) else reverse("queue"))


@require_POST
@actor
def hold(request: HttpRequest, item_id: int) -> HttpResponse:
    item = item_or_404(request.user, item_id)
    held_by = hold_item(item, request.user)
    note = "" if held_by == request.user else f"Already held by {held_by}."
    return _row(request, item, note)


@require_POST
@actor
def assign(request: HttpRequest, item_id: int) -> HttpResponse:
    item = item_or_404(request.user, item_id)
    try:
        assignee_id = int(request.POST.get("assignee", ""))
    except ValueError:
        return HttpResponseBadRequest("Choose an operator to assign.")
    assignee = assignee_numbered(request.user, assignee_id)
    if not isinstance(assignee, User):
        return HttpResponseBadRequest("That user cannot be assigned review items.")
    note = "" if assign_item(item, assignee) else "This item was resolved meanwhile."
    return _row(request, item, note)
