"""A failed or compensated upstream cancels the effects waiting on it: the interlock's move.
What an interlock holds back, and why, is `ledger.rules.interlocks`."""

from __future__ import annotations

from typing import Any

from django.db import connection

from ledger.models import Effect, EffectDependency, EffectEvent, EventKind
from ledger.models.states import CANCELLABLE, Status, sql_list
from ledger.policy import digests

_EFFECTS = Effect._meta.db_table
_DEPENDENCIES = EffectDependency._meta.db_table
_EVENTS = EffectEvent._meta.db_table


def cancel_dependents(upstream_id: Any) -> int:
    """Cancel, in one statement, every planned or awaiting_approval effect that (transitively,
    through such effects) depends on `upstream_id`, each with its own event. Returns how many."""
    data = {"upstream": str(upstream_id)}
    waiting, cancelled = sql_list(CANCELLABLE), Status.CANCELLED.value
    sql = f"""
        WITH RECURSIVE doomed(id) AS (
            SELECT d.downstream_id FROM {_DEPENDENCIES} d
              JOIN {_EFFECTS} e ON e.id = d.downstream_id AND e.status IN ({waiting})
             WHERE d.upstream_id = %s
            UNION
            SELECT d.downstream_id FROM {_DEPENDENCIES} d
              JOIN doomed ON d.upstream_id = doomed.id
              JOIN {_EFFECTS} e ON e.id = d.downstream_id AND e.status IN ({waiting})
        ), moved AS (
            UPDATE {_EFFECTS} e
               SET status = '{cancelled}', version = e.version + 1, updated_at = now(),
                   resolved_at = now(), next_check_at = NULL
              FROM {_EFFECTS} before  -- the row as the statement found it: its old status
             WHERE e.id IN (SELECT id FROM doomed) AND e.status IN ({waiting})
               AND before.id = e.id
         RETURNING e.id, before.status AS status_before
        )
        INSERT INTO {_EVENTS}
               (effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
        SELECT id, '{EventKind.TRANSITION.value}', 'system:interlock', status_before, '{cancelled}',
               'upstream_failed', %s::jsonb, %s, now()
          FROM moved
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [upstream_id, digests.jsonenc.dumps(data), digests.content_digest(data)]
        )
        return cursor.rowcount
