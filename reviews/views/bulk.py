"""Many review items at once (`reviews.queue.bulk`): choose, confirm on a page that says how many
items and which decision, then see each item's outcome; and an operator's saved queue filters
(`reviews.queue.saved`).

Plain form posts and full pages, so they work without JavaScript; the progress page of a
background job polls with htmx until the job is done."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from reviews.access.checks import actor, reader
from reviews.decisions.kinds import kind_of
from reviews.queue import saved
from reviews.queue.bulk import (
    ASSIGN,
    INLINE_LIMIT,
    Request,
    apply,
    check_named,
    job_of,
    matching_items,
    problems,
    start_job,
)
from reviews.queue.filters import assignee_numbered, queue_filter
from reviews.queue.pages import COUNT_CAP


class BadChoice(ValueError):
    """The form names items, a filter or an operator that cannot be used: a 400."""


def _selected(request: HttpRequest) -> list[int]:
    """The items the form names: the ticked rows, or every item the given filter matches (up
    to the queue's count cap)."""
    if request.POST.get("scope") == "all":
        filters = queue_filter(QueryDict(request.POST.get("query", "")), request.user)
        if not filters.is_valid():
            raise BadChoice("The filter is not valid.")
        return matching_items(filters)
    try:
        ids = list(dict.fromkeys(int(v) for v in request.POST.getlist("items")))
    except ValueError:
        raise BadChoice("Items are named by their numbers.") from None
    if len(ids) > COUNT_CAP:
        raise BadChoice(f"At most {COUNT_CAP} items at once.")
    # Naming an item of another team's effect is a 404 (ADR 0014).
    check_named(request.user, ids)
    return ids


def _asked(request: HttpRequest) -> Request:
    action = request.POST.get("action", "")
    assignee = None
    if action == ASSIGN:
        try:
            assignee = assignee_numbered(request.user, int(request.POST.get("assignee", "")))
        except ValueError:
            raise BadChoice("Choose an operator to assign.") from None
        if not isinstance(assignee, User):
            raise BadChoice("That user cannot be assigned review items.")
    return Request(
        action=action,
        reason=request.POST.get("reason", "").strip(),
        evidence=request.POST.get("evidence", "").strip(),
        assignee=assignee,
    )


def _what(ask: Request) -> str:
    if ask.action == ASSIGN and ask.assignee is not None:
        return f"Assign to {ask.assignee.get_username()}"
    kind = kind_of(ask.action)
    return kind.label if kind is not None else ask.action


@require_POST
@actor
def start(request: HttpRequest) -> HttpResponse:
    """First post: the confirmation page. Second (confirmed=1): up to `INLINE_LIMIT` items run
    now and their outcomes are shown; more run as a background job."""
    try:
        ids = _selected(request)
        ask = _asked(request)
    except BadChoice as exc:
        return render(request, "reviews/bulk.html", {"error": str(exc)}, status=400)
    wrong = problems(ask)
    if not ids:
        wrong["items"] = "select at least one item"
    context = {
        "ask": ask,
        "what": _what(ask),
        "count": len(ids),
        "inline_limit": INLINE_LIMIT,
        "post": request.POST,
        "items": request.POST.getlist("items"),
        "problems": sorted(wrong.items()),
    }
    if wrong:
        return render(request, "reviews/bulk.html", context, status=400)
    if request.POST.get("confirmed") != "1":
        return render(request, "reviews/bulk.html", context)
    if len(ids) > INLINE_LIMIT:
        job = start_job(ids, ask, request.user)
        return redirect("queue-bulk-progress", bulk_id=job.pk)
    outcomes = apply(ids, ask, request.user)
    return render(
        request,
        "reviews/bulk_result.html",
        {
            "what": _what(ask),
            "outcomes": outcomes,
            "done": sum(o.done for o in outcomes),
            "skipped": sum(not o.done for o in outcomes),
        },
    )


@require_GET
@reader  # its creator, even once no longer an operator: a job stopped for that says so here
def progress(request: HttpRequest, bulk_id: int) -> HttpResponse:
    job = job_of(request.user, bulk_id)
    outcomes = job.results
    done = sum(1 for o in outcomes if o["done"])
    context = {
        "job": job,
        "what": _what(Request(job.action, assignee=job.assignee)),
        "total": len(job.item_ids),
        "reached": len(outcomes),
        "done": done,
        "skipped": len(outcomes) - done,
        "outcomes": outcomes,
    }
    template = "reviews/bulk_job.html#progress" if request.htmx else "reviews/bulk_job.html"
    return render(request, template, context)


@require_POST
@actor  # the queue's own tools, like holding: auditors read the queue and keep nothing in it
def save_filter(request: HttpRequest) -> HttpResponse:
    """Save the queue's current query under a name (the same name replaces it)."""
    name = request.POST.get("name", "").strip()
    try:
        kept = saved.keep(request.user, name, request.POST.get("query", ""))
    except saved.NotSaved as exc:
        return HttpResponse(str(exc), status=400)
    messages.success(request, f"Saved filter “{name}”.")
    return redirect(f"{reverse('queue')}?{kept}")


@require_POST
@actor
def delete_filter(request: HttpRequest, filter_id: int) -> HttpResponse:
    """Delete one of the operator's own saved filters; anyone else's is not found."""
    forgotten = saved.forget(request.user, filter_id)
    messages.success(request, f"Deleted filter “{forgotten.name}”.")
    return redirect("queue")
