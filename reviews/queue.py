"""Who works on a review item: claiming and assigning (opening one is `ledger.reviewqueue`)."""

from __future__ import annotations

from typing import Any

from ledger.models import ReviewItem


def claim_item(item: ReviewItem, user: Any) -> Any:
    """Take an open, unassigned item. Returns who holds it now (the caller, or whoever was
    first: the conditional UPDATE lets exactly one of two simultaneous claims through)."""
    ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True, assignee__isnull=True).update(
        assignee=user
    )
    return ReviewItem.objects.select_related("assignee").get(pk=item.pk).assignee


def assign_item(item: ReviewItem, assignee: Any) -> bool:
    """Hand an open item to someone (reassigning is allowed). False when it was resolved."""
    return bool(
        ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True).update(assignee=assignee)
    )
