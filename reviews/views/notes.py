"""Notes on review items, releasing a hold, and the effect page's live check.

The two posts answer htmx with the panel (`reviews/_item_panel.html`), re-read after the
change; a plain form post goes back to the effect page. The live check answers 204 while
nothing changed, which htmx does not swap, and otherwise a banner saying what changed.
"""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger.errors import LedgerError, ValidationFailed
from ledger.models import ReviewItem
from reviews.access.checks import actor, reader
from reviews.access.teams import check_effect, item_or_404
from reviews.queue import holds, notes
from reviews.queue import live as live_check


def _panel(
    request: HttpRequest, item: ReviewItem, status: int = 200, **extra: object
) -> HttpResponse:
    """The panel as it is now, for the item's effect."""
    context = {**notes.item_panel(item, request.user), **extra}
    return render(request, "reviews/_item_panel.html", context, status=status)


@require_POST
@actor
def add(request: HttpRequest, item_id: int) -> HttpResponse:
    item = item_or_404(request.user, item_id)
    text = request.POST.get("text", "")
    try:
        note = notes.add_note(item, request.user, text)
    except ValidationFailed as exc:
        if request.htmx:
            return _panel(request, item, 422, note_problem=exc.detail, note_text=text)
        return HttpResponse(exc.detail, status=422, content_type="text/plain")
    if request.htmx:
        return _panel(request, item, new_note=note.pk)
    return redirect(reverse("effect", args=[item.effect_id]) + f"#note-{note.pk}")


@require_POST
@actor
def release(request: HttpRequest, item_id: int) -> HttpResponse:
    item = item_or_404(request.user, item_id)
    try:
        holds.release_item(item, request.user)
    except LedgerError as exc:
        if request.htmx:
            return _panel(request, item, exc.status, hold_problem=exc.detail)
        return HttpResponse(exc.detail, status=exc.status, content_type="text/plain")
    if request.htmx:
        return _panel(request, item)
    return redirect("effect", effect_id=item.effect_id)


@require_GET
@reader
def live(request: HttpRequest, effect_id: uuid.UUID) -> HttpResponse:
    seen = live_check.LiveState.parse(request.GET.get("version", ""), request.GET.get("item", ""))
    if seen is None:
        return HttpResponseBadRequest(
            "Give the page's state: ?version=<effect version>&item=<item.holder.notes>.",
            content_type="text/plain",
        )
    check_effect(request.user, effect_id)  # another team's: 404, as a missing one
    now = live_check.live_state(effect_id)
    if now is None:
        return HttpResponse("No such effect.", status=404, content_type="text/plain")
    if now == seen:
        return HttpResponse(status=204)
    context = {
        "changes": live_check.what_changed(effect_id, seen, now, request.user),
        "effect_id": effect_id,
        "now_version": now.version,
        "now_fingerprint": now.fingerprint,
    }
    return render(request, "reviews/_live.html#banner", context)
