"""Proof of absence from final statements: the provider's complete record of a period that
does not list an effect shows that the effect never arrived, if the effect could only have
arrived inside periods so recorded.

Each dispatch of an effect has a window: from its claim (the transition event to
`dispatching`) minus the tool's `statement_skew`, to when it left dispatching (the next
transition event from `dispatching`; its lease end, `lease_expires_at`, while it still is) plus
`settle_after` plus the skew. Absence is proven only when every window of the effect lies
inside the union of the tool's final statements' periods, no current line of any statement
names it, and it has no evidence of receipt.

An effect restore mode put in doubt (`restored_gap`), or that started in doubt (an intent
recorded `unknown` while a restore window was open), may have been sent on the lost branch with
no event here to show it: it has one more window, from the restore window's `lost_since` less
the longest lease less the skew to its `started_at` plus the longest lease, `settle_after` and
the skew (`ledger.rules.reach.lost_dispatch_sql`; `statement_bounds` is the same range). An
intent that started in doubt has only that window. Absence is proven for such an effect only
when the tool's statements reference effects by idempotency key: the copy sent on the lost
branch carried the same key, but another effect id. Only `unknown` effects, and `dispatching` ones
whose lease has run out, are moved: to `planned` (reason `never_received`) while attempts
remain, else to `failed` (`never_sent`). Both release the effect's amount from the limits
and close review items that asked what happened (`ledger.effects.transitions`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from ledger.effects.transitions import Move, SqlExpr, transition_many
from ledger.models import Effect, EventKind, StatementImport, StatementLine, Tool
from ledger.models.states import Status
from ledger.rules.events import event_values
from ledger.rules.reach import lost_dispatch_sql
from ledger.rules.restore_state import longest_lease
from ledger.statements.apply import (
    _EFFECTS,
    _EVENTS,
    ACTOR,
    BATCH,
    FIRST_UUID,
    MOVABLE_WHERE,
    Progress,
    receipt_sql,
    skew_of,
)

_IMPORTS = StatementImport._meta.db_table
_LINES = StatementLine._meta.db_table

# The effects of one batch whose absence the final statements prove, with their windows.
_PROVEN = f"""
    WITH cover AS (
        SELECT range_agg(tstzrange(period_start, period_end, '[)')) AS periods
          FROM {_IMPORTS} WHERE tool = %(tool)s AND NOT provisional
    ), candidates AS (
        SELECT e.id, e.status, e.version, e.kind, e.attempt, e.max_attempts, e.lease_expires_at
          FROM {_EFFECTS} e
         WHERE e.tool = %(tool)s AND e.id > %(after)s::uuid AND e.id <= %(last)s::uuid
           AND (e.status = 'unknown'
                OR (e.status = 'dispatching' AND e.lease_expires_at < now()))
    ), doubted AS ({lost_dispatch_sql("candidates")}
    ), windows AS (
        SELECT d.id, tstzrange(d.lost_from - %(skew)s, d.lost_until + %(settle)s + %(skew)s,
                               '[]') AS dispatch
          FROM doubted d
        UNION ALL
        SELECT c.id,
               tstzrange(claim.created_at - %(skew)s,
                         coalesce((SELECT min(n.created_at) FROM {_EVENTS} n
                                    WHERE n.effect_id = c.id AND n.kind = 'transition'
                                      AND n.from_status = 'dispatching' AND n.id > claim.id),
                                  c.lease_expires_at) + %(settle)s + %(skew)s,
                         '[]') AS dispatch
          FROM candidates c
          JOIN {_EVENTS} claim ON claim.effect_id = c.id AND claim.kind = 'transition'
                              AND claim.to_status = 'dispatching'
    )
    SELECT c.id, c.status, c.version, c.kind, c.attempt, c.max_attempts,
           (SELECT json_agg(json_build_array(lower(w.dispatch), upper(w.dispatch)))
              FROM windows w WHERE w.id = c.id) AS windows
      FROM candidates c, cover
     WHERE EXISTS (SELECT 1 FROM windows w WHERE w.id = c.id)
       AND NOT EXISTS (SELECT 1 FROM windows w WHERE w.id = c.id
                        AND NOT coalesce(cover.periods @> w.dispatch, false))
       AND NOT EXISTS (SELECT 1 FROM {_LINES} l
                        WHERE l.effect_id = c.id AND l.removed_by_id IS NULL)
       AND NOT {receipt_sql("c")}
       AND (SELECT e.provider_ref FROM {_EFFECTS} e WHERE e.id = c.id) = ''
       AND NOT (%(by_id)s AND EXISTS (SELECT 1 FROM doubted d WHERE d.id = c.id))
     ORDER BY c.id
"""


def absence_phase(made: StatementImport, tool: Tool) -> Progress:
    if made.provisional:
        return Progress(None)  # only final statements prove absence
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM (SELECT e.id FROM {_EFFECTS} e "
            "WHERE e.tool = %(tool)s AND e.id > %(after)s::uuid "
            "AND (e.status = 'unknown' OR (e.status = 'dispatching' "
            "AND e.lease_expires_at < now())) ORDER BY e.id LIMIT %(limit)s) batch "
            "ORDER BY id DESC LIMIT 1",
            _params(made, tool),
        )
        last = cursor.fetchone()
        if last is None:
            return Progress(None)
        cursor.execute(_PROVEN, {**_params(made, tool), "last": last[0]})
        rows = cursor.fetchall()
    moves = [_move(made, row) for row in rows]
    moved = transition_many(moves, actor=ACTOR, where=MOVABLE_WHERE) if moves else set()
    counts = {"retried": 0, "failed": 0}
    for move in moves:
        if move.effect.id in moved:
            counts["retried" if move.to == Status.PLANNED else "failed"] += 1
    return Progress(str(last[0]), counts)


def _params(made: StatementImport, tool: Tool) -> dict[str, Any]:
    return {
        "tool": tool.name,
        "after": made.cursor or FIRST_UUID,
        "limit": BATCH,
        "skew": skew_of(tool),
        # As the lookups' proofs do (`ledger.rules.lookup_absence`): the default where none is
        # declared.
        "settle": tool.settle_after or timedelta(seconds=settings.LEDGER_SETTLE_AFTER),
        "lease": longest_lease(),
        # A line names an effect by its id only under this reference: a copy of an effect in
        # doubt sent on the lost branch had another id, so its line would name nothing here.
        "by_id": tool.statement_reference == "effect_id",
    }


def _move(made: StatementImport, row: tuple[Any, ...]) -> Move:
    effect_id, status, version, kind, attempt, max_attempts, windows = row
    retry = attempt < max_attempts
    evidence = {
        "statement": made.pk,
        "verdict": "absent",
        "why": "every dispatch window lies inside final statements that do not list it",
        "windows": windows,
    }
    before = event_values(
        kind=EventKind.STATEMENT,
        actor=ACTOR,
        from_status=status,
        to_status=status,
        reason="absent",
        data=evidence,
    )
    # A first request that lands late after all shows in the next statement, and for a tool
    # with a lookup in one more lookup once the effect has resolved (`reconcilers.tailcheck`).
    tail = {"tail_check_at": SqlExpr("now()")}
    changes: dict[str, Any] = {"next_check_at": None, "checks": 0, **tail} if retry else tail
    return Move(
        Effect(id=effect_id, status=status, version=version, kind=kind),
        Status.PLANNED if retry else Status.FAILED,
        reason="never_received" if retry else "never_sent",
        changes=changes,
        data={"statement": made.pk},
        before=[before],
    )
