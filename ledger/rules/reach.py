"""How far the lost branch reaches: when a copy of an effect restore mode put in doubt (or that
started in doubt) could have been sent on the branch the database lost.

From the window's `lost_since` less the longest lease (a claim taken that long before the loss)
to its `started_at` plus the longest lease (a lease taken on the lost branch just before the mode
began may still be used to send). No event of the database shows such a dispatch, so lookups
(`ledger.rules.lookup_absence`) and statements (`ledger.statements.absence`) prove such an
effect absent only over this whole range.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from ledger.models import EffectEvent, RestoreWindow
from ledger.rules.restore_state import longest_lease

# The reason of the move into `unknown` that entering restore mode makes (`mode.REASON`).
REASON = "restored_gap"


def lost_dispatch_sql(effects: str) -> str:
    """SQL: (id, lost_from, lost_until) for each effect of `effects` (a relation with an `id`
    column) that restore mode put in doubt (`restored_gap`) or that started in doubt (its
    intent event went to `unknown`), for each restore window whose [started_at, ended_at)
    holds that event: when a copy of it on the lost branch could have been sent, from
    `lost_since` less the longest lease to `started_at` plus the longest lease. No event of
    the database shows such a dispatch. Takes the parameter %(lease)s (`longest_lease`)."""
    return f"""
        SELECT d.effect_id AS id, w.lost_since - %(lease)s AS lost_from,
               w.started_at + %(lease)s AS lost_until
          FROM {EffectEvent._meta.db_table} d
          JOIN {RestoreWindow._meta.db_table} w
            ON d.created_at >= w.started_at AND (w.ended_at IS NULL OR d.created_at < w.ended_at)
         WHERE d.effect_id IN (SELECT id FROM {effects}) AND d.to_status = 'unknown'
           AND (d.kind = 'intent' OR (d.kind = 'transition' AND d.reason = '{REASON}'))"""


def lost_dispatch(effect_ids: Sequence[Any]) -> dict[Any, tuple[datetime, datetime]]:
    """`lost_dispatch_sql` for the given effects, in one query: {id: (lost_from, lost_until)},
    the widest range over their windows; effects never in doubt are left out."""
    if not effect_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH batch AS (SELECT unnest(%(ids)s::uuid[]) AS id) "
            "SELECT id, min(lost_from), max(lost_until) "
            f"FROM ({lost_dispatch_sql('batch')}) lost GROUP BY id",
            {"ids": [str(i) for i in effect_ids], "lease": longest_lease()},
        )
        return {row[0]: (row[1], row[2]) for row in cursor.fetchall()}
