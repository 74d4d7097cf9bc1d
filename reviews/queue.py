"""Opening review items: effects that no machine can resolve go to people."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection

from reviews.models import ReviewItem

_TABLE = ReviewItem._meta.db_table


def open_review(effect_id: Any, reason: str) -> bool:
    """Open a review item unless one is open already. Returns whether one was opened."""
    with connection.cursor() as cursor:
        # Due within the effect's tool's back-office window, or the default one.
        cursor.execute(
            f"INSERT INTO {_TABLE} (effect_id, reason, opened_at, due_at, resolution) "
            f"SELECT e.id, %s, now(), now() + COALESCE(t.backoffice_window, "
            f"make_interval(secs => %s)), '' "
            f"FROM ledger_effect e LEFT JOIN ledger_tool t ON t.name = e.tool WHERE e.id = %s "
            f"ON CONFLICT (effect_id) WHERE resolved_at IS NULL DO NOTHING",
            [reason, settings.LEDGER_BACKOFFICE_WINDOW, effect_id],
        )
        return cursor.rowcount == 1


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
