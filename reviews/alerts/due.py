"""The review items' alerts: one when an item has used most of its time, one when it is overdue.

`sweep` (a django-q2 schedule) enqueues, in one set-based statement, an alert for every open
review item that has passed 75% of its time (opened_at → due_at) and one for every item that
is overdue; the unique (kind, key) of the outbox makes each fire once, however often the sweep
runs. An item first seen already overdue gets only the overdue alert. The sender
(`reviews.alerts.sender`) delivers them.
"""

from __future__ import annotations

from django.db import connection

from ledger.models import Agent, Alert, AlertKind, Effect, ReviewItem
from ledger.models.review import DUE_SOON  # the fraction of an item's time: "due soon"


def sweep() -> int:
    """Enqueue the review items' alerts that are due. Returns how many were new."""
    # Open items are few (the review queue); the partial index review_open_due_idx finds them.
    sql = f"""
        INSERT INTO {Alert._meta.db_table}
               (id, kind, key, payload, created_at, attempts, delivered, last_error)
        SELECT gen_random_uuid(), m.kind, r.id::text,
               jsonb_build_object(
                   'summary', e.effect_key || ' (' || e.tool || ', ' || r.reason || ')',
                   'link', '/effects/' || e.id || '/',
                   'review_item', r.id, 'effect_id', e.id, 'effect_key', e.effect_key,
                   'tool', e.tool, 'agent', a.name, 'run_id', e.run_id, 'status', e.status,
                   'reason', r.reason, 'opened_at', r.opened_at, 'due_at', r.due_at),
               now(), 0, '[]'::jsonb, ''
          FROM {ReviewItem._meta.db_table} r
          JOIN {Effect._meta.db_table} e ON e.id = r.effect_id
          JOIN {Agent._meta.db_table} a ON a.id = e.agent_id
         CROSS JOIN LATERAL (VALUES
                   (%(soon)s, r.opened_at + (r.due_at - r.opened_at) * %(fraction)s),
                   (%(overdue)s, r.due_at)) AS m(kind, fires_at)
         WHERE r.resolved_at IS NULL
           AND m.fires_at <= now()
           AND NOT (m.kind = %(soon)s AND r.due_at <= now())
        ON CONFLICT (kind, key) DO NOTHING
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "soon": AlertKind.REVIEW_DUE_SOON.value,
                "overdue": AlertKind.REVIEW_OVERDUE.value,
                "fraction": DUE_SOON,
            },
        )
        return cursor.rowcount
