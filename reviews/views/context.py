"""Template context every page needs: what the signed-in user may do, the time, and the
banners: what is halted, and how much waits for a second operator's approval."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import SimpleLazyObject

from ledger.containment.halts import active_halts
from ledger.effects.states import Status
from ledger.observability.metrics import summary
from reviews.access.checks import can_act, can_read
from reviews.views.approvals import pending_proposals


def roles(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {"can_act": can_act(user), "can_read": can_read(user), "now": timezone.now()}


def waiting_for_approval() -> int:
    """How many effects and retry proposals wait for four-eyes (the approvals page's rows).
    The effects are counted from the ledger's summary (`ledger.observability.summary`, refreshed
    every few seconds by a thread), not by a count over the effects on every page; the proposals are
    few and indexed."""
    held = sum(
        n
        for (_, _, _, status), n in summary.latest().effect_counts.items()
        if status == Status.AWAITING_APPROVAL
    )
    return held + pending_proposals().count()


def halts(request: HttpRequest) -> dict[str, Any]:
    """The banners on every page of a signed-in reader: the active halts and the number of
    approvals waiting. Lazy: htmx partials that do not show the banners cost no query."""
    if not can_read(request.user):
        return {"active_halts": (), "awaiting_approval": 0}
    return {
        "active_halts": SimpleLazyObject(active_halts),
        "awaiting_approval": SimpleLazyObject(waiting_for_approval),
    }
