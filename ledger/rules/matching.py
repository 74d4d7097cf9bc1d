"""Does the provider's record of a payment match what we asked for?

A provider's "done" counts only if it did what was requested (docs/concepts.md#recovery: found →
confirmed *after* checking amount, currency and target). Lookups (`reconcilers`) and webhooks
(`ledger.api.webhooks`) both ask this one function, so the two paths cannot disagree.

The check applies to payment-shaped requests: a charge names an `amount` (with `currency`, and
the effect's target is the account charged); a refund names the `charge` it refunds. Other
requests (an email, a ticket) have nothing here to compare.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from ledger.models import Effect


def same_amount(ours: Any, theirs: Any) -> bool:
    """Exact decimal equality; anything that is not a number never matches."""
    try:
        return Decimal(str(ours)) == Decimal(str(theirs))
    except (InvalidOperation, ValueError):
        return False


def is_payment(request: dict[str, Any]) -> bool:
    return "amount" in request or "charge" in request


def is_refund(request: dict[str, Any]) -> bool:
    return "charge" in request


def differences(effect: Effect, record: dict[str, Any]) -> list[str]:
    """The fields where the provider's `record` differs from the effect's request."""
    request = effect.request or {}
    if not is_payment(request):
        return []
    differs = []
    if "amount" in request and not same_amount(request["amount"], record.get("amount")):
        differs.append("amount")
    if is_refund(request):
        if request.get("charge") != record.get("charge"):
            differs.append("charge")
        return differs
    if str(request.get("currency", "")).upper() != str(record.get("currency", "")).upper():
        differs.append("currency")
    if effect.target != record.get("account"):
        differs.append("target")
    return differs
