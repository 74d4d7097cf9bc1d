"""Opening review items: effects that no machine can resolve go to people.

Every item is opened by one INSERT shape, whether for one effect (`open_review`) or for a whole
sweep (`reviews.escalation`): due within the effect's tool's `resolve_within` or the default
(LEDGER_RESOLVE_WITHIN, 24 h), and a no-op where the effect already has an open item (the
partial unique index `review_one_open_uniq`). The alerts (`reviews.alerts`) count down to that
due time. A trigger (migration 0016) copies the effect's tool, agent, run and creation time
onto every new item, so that the review queue filters and sorts by them without the effects.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection

from ledger.models import Effect, Reason, ReviewItem, Tool

_TABLE = ReviewItem._meta.db_table


def open_reviews_sql(candidates: str) -> str:
    """The INSERT that opens an item for each row of `candidates`, a SELECT of
    `(effect_id, reason)`."""
    default = int(settings.LEDGER_RESOLVE_WITHIN)
    return f"""
        INSERT INTO {_TABLE} (effect_id, reason, opened_at, due_at, resolution)
        SELECT c.effect_id, c.reason, now(),
               now() + COALESCE(t.resolve_within, make_interval(secs => {default})), ''
          FROM ({candidates}) c
          JOIN {Effect._meta.db_table} e ON e.id = c.effect_id
          LEFT JOIN {Tool._meta.db_table} t ON t.name = e.tool
        ON CONFLICT (effect_id) WHERE resolved_at IS NULL DO NOTHING
    """


def open_review(effect_id: Any, reason: Reason) -> bool:
    """Open a review item unless one is open already. Returns whether one was opened."""
    with connection.cursor() as cursor:
        cursor.execute(
            open_reviews_sql("SELECT %(effect)s::uuid AS effect_id, %(reason)s AS reason"),
            {
                "effect": effect_id,
                "reason": Reason(reason).value,
            },
        )
        return cursor.rowcount == 1
