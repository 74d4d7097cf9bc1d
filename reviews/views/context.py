"""Template context every page needs: what the signed-in user may do, the time, and the
banners: what is halted, and how much waits for a second operator's approval."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import SimpleLazyObject

from ledger.containment.halts import active_halts
from ledger.effects.states import Status
from reviews.access.checks import can_act, can_read
from reviews.access.counts import summary_for, visible_halts
from reviews.access.teams import visible_effects
from reviews.views.approvals import pending_proposals


def roles(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {"can_act": can_act(user), "can_read": can_read(user), "now": timezone.now()}


def waiting_for_approval(user: Any) -> int:
    """How many effects and retry proposals wait for four-eyes (the approvals page's rows), of
    the teams `user` sees. The effects are counted from the ledger's summary
    (`ledger.observability.summary`, refreshed every few seconds by a thread; per team in
    `reviews.access.counts`), not by a count over the effects on every page; the proposals are
    few and indexed."""
    held = sum(
        n
        for (_, _, _, status), n in summary_for(user).effect_counts.items()
        if status == Status.AWAITING_APPROVAL
    )
    return held + visible_effects(user, pending_proposals(), "effect__").count()


def halts(request: HttpRequest) -> dict[str, Any]:
    """The banners on every page of a signed-in reader: the active halts and the number of
    approvals waiting. Lazy: htmx partials that do not show the banners cost no query."""
    if not can_read(request.user):
        return {"active_halts": (), "awaiting_approval": 0}
    user = request.user
    return {
        "active_halts": SimpleLazyObject(lambda: visible_halts(user, active_halts())),
        "awaiting_approval": SimpleLazyObject(lambda: waiting_for_approval(user)),
    }
