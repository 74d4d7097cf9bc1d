"""Effects by (agent's mode, kind, tool, status), read from the counts PostgreSQL keeps as
effects are written (`ledger/sql/effect_counts.sql`, `ledger.models.counts`), never from the
effects table.

A count is its folded row plus the deltas appended since the last fold, read in one statement,
so it is exact for the reader's snapshot however long ago the last fold ran. Folding only keeps
that read short: `fold` runs before each read of the summary (at most once per
`LEDGER_METRICS_REFRESH` per process), and a django-q2 schedule runs it every minute
(`reconcilers.schedules`) for when nobody scrapes. What a read costs grows with the number of
keys (agents × tools × statuses) and the deltas of one refresh period, not with the effects.
"""

from __future__ import annotations

from django.db import connection

from ledger.models import Agent, EffectCount, EffectCountDelta

_COUNTS = EffectCount._meta.db_table
_DELTAS = EffectCountDelta._meta.db_table
_AGENTS = Agent._meta.db_table


def fold() -> int:
    """Move the deltas into the counts; how many were moved (0 while another fold runs)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_fold_effect_counts()")
        return cursor.fetchone()[0]


def effect_counts() -> dict[tuple[str, str, str, str], int]:
    """(agent's mode, kind, tool, status) → count, keys whose count is zero left out."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.mode, c.kind, c.tool, c.status, sum(c.n)::bigint "
            f"FROM (SELECT agent_id, kind, tool, status, n FROM {_COUNTS} "
            f"UNION ALL SELECT agent_id, kind, tool, status, n FROM {_DELTAS}) c "
            f"JOIN {_AGENTS} a ON a.id = c.agent_id "
            "GROUP BY a.mode, c.kind, c.tool, c.status HAVING sum(c.n) <> 0"
        )
        return {(mode, kind, tool, status): n for mode, kind, tool, status, n in cursor}
