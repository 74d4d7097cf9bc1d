"""Template context every page needs: what the signed-in user may do, the time, and what is
halted (the banner)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import SimpleLazyObject

from ledger.halts import active_halts
from reviews.access import can_act, can_read


def roles(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {"can_act": can_act(user), "can_read": can_read(user), "now": timezone.now()}


def halts(request: HttpRequest) -> dict[str, Any]:
    """The active halts, for the banner on every page of a signed-in reader. Lazy: htmx
    partials that do not show the banner cost no query."""
    if not can_read(request.user):
        return {"active_halts": ()}
    return {"active_halts": SimpleLazyObject(active_halts)}
