"""Four-eyes approval at intent time: a tool's `approve_above` threshold.

An intent whose amount is above its tool's `approve_above` is inserted in `awaiting_approval`
instead of `planned` (decided once, at insert: a repeat returns the effect as it is, whatever
the tool says now) and a review item `approval_required` opens for it. Nobody can claim it
until an operator other than the one who asked approves it (`reviews.decisions`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ledger.errors import Refused
from ledger.models import Effect, EffectEvent, EventKind
from ledger.models.states import Status
from ledger.policy.money import amount_of, exponent


class ApprovalRequired(Refused):
    """A claim of an effect that waits for a second operator's approval."""

    code = "approval_required"


def needs_approval(policy: Any, request: Any) -> bool:
    """Is this request's amount above the tool's `approve_above`? Compared in minor units of
    the request's currency, exactly."""
    if policy.approve_above is None:
        return False
    money = amount_of(policy, request)
    if money is None:
        return False
    return Decimal(money.minor) > policy.approve_above.scaleb(exponent(money.currency))


def refuse_claim(effect: Effect) -> None:
    """Raise `ApprovalRequired` for an effect that waits for approval."""
    if effect.status == Status.AWAITING_APPROVAL:
        raise ApprovalRequired(
            "This effect is above its tool's approval threshold and waits for an operator's "
            "approval; wait for it (GET /effects/{id}) before claiming.",
            status=effect.status,
        )


def requester(effect: Effect) -> str:
    """Who asked for the effect: the actor of its intent ("agent:…" or "operator:…")."""
    return (
        EffectEvent.objects.filter(effect=effect, kind=EventKind.INTENT)
        .order_by("id")
        .values_list("actor", flat=True)
        .first()
        or ""
    )
