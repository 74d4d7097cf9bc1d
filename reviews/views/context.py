"""Template context every page needs: what the signed-in user may do, the time, and the
banners: what is halted, and how much waits for a second operator's approval."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import SimpleLazyObject

from ledger.rules.halts import active_halts
from reviews.access.checks import can_act, can_read
from reviews.access.counts import visible_halts
from reviews.decisions.waiting import waiting_count


def roles(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {"can_act": can_act(user), "can_read": can_read(user), "now": timezone.now()}


def halts(request: HttpRequest) -> dict[str, Any]:
    """The banners on every page of a signed-in reader: the active halts and the number of
    approvals waiting. Lazy: htmx partials that do not show the banners cost no query."""
    if not can_read(request.user):
        return {"active_halts": (), "awaiting_approval": 0}
    user = request.user
    return {
        "active_halts": SimpleLazyObject(lambda: visible_halts(user, active_halts())),
        "awaiting_approval": SimpleLazyObject(lambda: waiting_count(user)),
    }
