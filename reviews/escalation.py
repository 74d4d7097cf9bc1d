"""Escalation: effects unresolved past their tool's window go to the review queue.

One set-based statement: the partial index on unresolved effects' age finds candidates older
than the shortest window of any tool; each is then held to its own tool's window; the partial
unique index on open items makes a repeat sweep a no-op.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from reviews.models import Reason


def escalate() -> int:
    """Open an `unresolved_past_window` item for every overdue effect. Returns how many."""
    default = settings.LEDGER_ESCALATE_AFTER
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH windows AS (
                SELECT name, escalate_after, backoffice_window FROM ledger_tool
            ), overdue AS (
                SELECT e.id, w.backoffice_window
                  FROM ledger_effect e
                  LEFT JOIN windows w ON w.name = e.tool
                 WHERE e.status IN ('planned', 'dispatching', 'awaiting_confirmation', 'unknown')
                   AND e.created_at < now() - LEAST(
                           make_interval(secs => %(default)s),
                           COALESCE((SELECT min(escalate_after) FROM windows),
                                    make_interval(secs => %(default)s)))
                   AND e.created_at < now() - COALESCE(w.escalate_after,
                                                        make_interval(secs => %(default)s))
            )
            INSERT INTO reviews_reviewitem (effect_id, reason, opened_at, due_at, resolution)
            SELECT id, %(reason)s, now(),
                   now() + COALESCE(backoffice_window, make_interval(secs => %(window)s)), ''
              FROM overdue
            ON CONFLICT (effect_id) WHERE resolved_at IS NULL DO NOTHING
            """,
            {
                "default": default,
                "reason": Reason.STALE,
                "window": settings.LEDGER_BACKOFFICE_WINDOW,
            },
        )
        return cursor.rowcount
