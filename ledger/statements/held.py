"""Statement lines held because their effect could not move yet, looked at again once it can.

A line imported while its effect is `dispatching` under a live lease is `held`: the process
holding the lease may still report, and a statement does not overrule it. If that process died
instead, the lease runs out and the effect becomes `unknown` (or stays `dispatching` past its
lease), and nothing else would look at the line again: later statements of the tool do not
repeat it, and since a line names the effect its absence is not proven either. So the effect
would stay in doubt with the provider's record of it already in the ledger.

`revisit()` (the schedule `statement-held-lines`, every minute) finds the effects, now movable,
that have lines still `held`, and gives each the verdict `ledger.statements.verdicts` gives it
with all its current lines, as an import would. Only a verdict that moves it (confirm, fail) is
applied, under the same write-time guard as an import's (`apply.MOVABLE_WHERE`), with a
statement event naming the statement its lines came from; any other verdict leaves the lines
`held` and records nothing, so an effect still waiting (a pending line, evidence of receipt)
costs a read a minute and no event. Each tool's effects are judged under its statement lock,
one batch per transaction.
"""

from __future__ import annotations

import logging

from django.db import connection, transaction

from ledger.models import Effect, StatementLine, Tool
from ledger.statements import verdicts
from ledger.statements.apply import EFFECT_FACTS, apply_moves, facts, move_of, set_outcomes, skew_of
from ledger.statements.stage import lock_tool

BATCH = 1000
_LINES = StatementLine._meta.db_table
_EFFECTS = Effect._meta.db_table
log = logging.getLogger(__name__)

_MOVABLE = (
    "(e.status = 'unknown' OR (e.status = 'dispatching' AND e.lease_expires_at < now()))"
    " AND e.provider_ref = ''"
)
_TOOLS = f"""
    SELECT DISTINCT e.tool FROM {_LINES} l JOIN {_EFFECTS} e ON e.id = l.effect_id
     WHERE l.outcome = 'held' AND l.removed_by_id IS NULL AND {_MOVABLE}
"""
_HELD_OF_TOOL = f"""
    WITH batch AS (
        SELECT DISTINCT l.effect_id FROM {_LINES} l JOIN {_EFFECTS} e ON e.id = l.effect_id
         WHERE l.outcome = 'held' AND l.removed_by_id IS NULL AND e.tool = %(tool)s
           AND e.id > %(after)s::uuid AND {_MOVABLE}
         ORDER BY l.effect_id LIMIT %(limit)s
    )
    {EFFECT_FACTS}"""
FIRST_UUID = "00000000-0000-0000-0000-000000000000"


def revisit() -> dict[str, int]:
    """Every tool's movable effects with held lines, judged again; the counts of what moved."""
    with connection.cursor() as cursor:
        cursor.execute(_TOOLS)
        names = [row[0] for row in cursor.fetchall()]
    counts: dict[str, int] = {}
    for name in names:
        for outcome, n in _revisit_tool(name).items():
            counts[outcome] = counts.get(outcome, 0) + n
    if counts:
        log.info("statement lines held earlier settled effects: %s", counts)
    return counts


def _revisit_tool(name: str) -> dict[str, int]:
    tool = Tool.objects.filter(name=name).first()
    if tool is None:
        return {}
    counts: dict[str, int] = {}
    after = FIRST_UUID
    while after is not None:
        with transaction.atomic():
            with connection.cursor() as cursor:
                lock_tool(cursor, name)
                cursor.execute(_HELD_OF_TOOL, {"tool": name, "after": after, "limit": BATCH})
                rows = cursor.fetchall()
            moved = _judge(rows, tool)
        for outcome, n in moved.items():
            counts[outcome] = counts.get(outcome, 0) + n
        after = str(rows[-1][0]) if len(rows) == BATCH else None
    return counts


def _judge(rows: list[tuple[object, ...]], tool: Tool) -> dict[str, int]:
    """The moves the batch's verdicts make, applied; other verdicts leave everything as it is."""
    skew = skew_of(tool)
    moves = []
    for row in rows:
        effect, lines = facts(row)
        verdict = verdicts.verdict_on(effect, lines, skew)
        if verdict.action in (verdicts.CONFIRM, verdicts.FAIL):
            moves.append(move_of(verdict.lines[-1].statement, effect, verdict))
    counts, outcomes = apply_moves(moves)
    set_outcomes(outcomes)
    return counts
