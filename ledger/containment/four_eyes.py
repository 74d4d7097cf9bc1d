"""Four-eyes approval at intent time: a tool's `approve_above` threshold.

An intent whose amount is above its tool's `approve_above` is inserted in `awaiting_approval`
instead of `planned` (decided once, at insert: a repeat returns the effect as it is, whatever
the tool says now) and a review item `approval_required` opens for it. Nobody can claim it
until an operator other than the one who asked approves it (`reviews.decisions`).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from ledger.containment.limits import amount_of, exponent
from ledger.effects.states import Status
from ledger.errors import Refused
from ledger.models import Effect, EffectEvent, EventKind


class ApprovalRequired(Refused):
    """A claim of an effect that waits for a second operator's approval."""

    code = "approval_required"


def threshold(raw: Any) -> Decimal:
    """A declared `approve_above` ("1000.00", 1000) as an exact decimal; floats are refused,
    since 0.1 is not what the declaration meant."""
    if isinstance(raw, bool) or not isinstance(raw, int | str | Decimal):
        raise ValueError('must be an integer or a decimal string such as "1000.00"')
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ValueError('must be an integer or a decimal string such as "1000.00"') from None
    if not value.is_finite() or value < 0:
        raise ValueError("must be a non-negative amount")
    return value


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
