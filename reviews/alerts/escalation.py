"""Escalation: effects unresolved past their tool's window go to the review queue.

One set-based statement: the partial index on unresolved effects' age finds candidates older
than the shortest window of any tool; each is then held to its own tool's window; the partial
unique index on open items makes a repeat sweep a no-op.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from ledger.models import Effect, Reason, Tool
from ledger.models.states import INCOMPLETE, sql_list
from ledger.rules.reviewqueue import open_reviews_sql


def escalate() -> int:
    """Open an `unresolved_past_window` item for every overdue effect. Returns how many."""
    effects, tools = Effect._meta.db_table, Tool._meta.db_table
    overdue = f"""
        SELECT e.id AS effect_id, %(reason)s AS reason
          FROM {effects} e
          LEFT JOIN {tools} w ON w.name = e.tool
         WHERE e.status IN ({sql_list(INCOMPLETE)})
           AND e.created_at < now() - LEAST(
                   make_interval(secs => %(default)s),
                   COALESCE((SELECT min(escalate_after) FROM {tools}),
                            make_interval(secs => %(default)s)))
           AND e.created_at < now() - COALESCE(w.escalate_after,
                                                make_interval(secs => %(default)s))
    """
    with connection.cursor() as cursor:
        cursor.execute(
            open_reviews_sql(overdue),
            {
                "default": settings.LEDGER_ESCALATE_AFTER,
                "reason": Reason.STALE.value,
            },
        )
        return cursor.rowcount
