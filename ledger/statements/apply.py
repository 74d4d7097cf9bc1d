"""Applying a staged statement, one batch per transaction, resumable from the import row.

`step(import_id)` runs one batch of the import's current phase and commits it together with
the row's `phase`, `cursor` and counts, so that a crash loses at most the batch in flight and
`resume` goes on from the row. Every batch holds the tool's statement lock
(`ledger.statements.stage.lock_tool`) and reads the effects after taking it, so a batch never
judges what another import of the tool is changing at that moment (a move it made would
be lost to the other's, and its lines never looked at again). Phases, in order:

1. `lines`: the effects the import's lines name, at most `BATCH` lines' worth at a time in
   effect id order. Each effect is read with all its current lines (from every statement)
   and given its verdict by `ledger.statements.verdicts`; the moves go through
   `ledger.effects.transitions.transition_many` (one statement per shape), with the statement event
   ahead of each transition.
2. `removals`: lines this import's revision removed; their effects get a
   `statement_line_removed` review item and a statement event.
3. `absence` (final statements only): `ledger.statements.absence`.
4. `orphans`: `ledger.statements.orphans`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from ledger.containment.duplicates import report_duplicate
from ledger.effects.transitions import Move, transition_many
from ledger.models import (
    Effect,
    EffectEvent,
    EventKind,
    Reason,
    StatementImport,
    StatementLine,
    Tool,
)
from ledger.models.statements import Phase
from ledger.models.states import Status
from ledger.rules.events import event_values, record_event
from ledger.rules.reviewqueue import open_review
from ledger.statements import verdicts
from ledger.statements.stage import lock_tool
from ledger.statements.verdicts import EffectFact, LineFact, Verdict

ACTOR = "system:statements"
# Lines (lines phase), removed lines or candidate effects (later phases) per transaction.
BATCH = 5000
FIRST_UUID = "00000000-0000-0000-0000-000000000000"
_LINES = StatementLine._meta.db_table
_EFFECTS = Effect._meta.db_table
_EVENTS = EffectEvent._meta.db_table
_DEFAULT_SKEW = timedelta(minutes=5)
log = logging.getLogger(__name__)


def receipt_sql(effect: str) -> str:
    """SQL: the effect `effect` (a table alias) has evidence that the provider received it:
    a provider's callback, a lookup that found it or said pending, a late outcome naming a
    provider ref; an event of those kinds whose data retention redacted counts as well (what
    it said can no longer be read)."""
    return f"""EXISTS (SELECT 1 FROM {_EVENTS} r WHERE r.effect_id = {effect}.id AND (
        (r.kind = 'transition' AND (starts_with(r.actor, 'provider:')
                                    OR r.data @> '{{"webhook": true}}'))
        OR (r.kind = 'reconciliation' AND (r.reason = 'found' OR r.data->>'status' = 'pending'))
        OR (r.kind = 'late_outcome' AND coalesce(r.data->>'provider_ref', '') <> '')
        OR (r.kind IN ('reconciliation', 'late_outcome') AND r.data @> '{{"redacted": true}}')))"""


# What a statement's move requires of the effect still at write time, besides its version:
# no provider ref, no evidence of receipt, and a lease that has run out if it is dispatching.
MOVABLE_WHERE = [
    (f"{_EFFECTS}.provider_ref = ''", []),
    (f"({_EFFECTS}.status <> 'dispatching' OR {_EFFECTS}.lease_expires_at < now())", []),
    (f"NOT {receipt_sql(_EFFECTS)}", []),
]


@dataclass
class Progress:
    """A batch's result: the cursor to go on from (None: the phase is over), the counts."""

    cursor: str | None
    counts: dict[str, int] = field(default_factory=dict)


def skew_of(tool: Tool) -> timedelta:
    return tool.statement_skew if tool.statement_skew is not None else _DEFAULT_SKEW


def step(import_id: int, phases: dict[str, Callable[[StatementImport, Tool], Progress]]) -> bool:
    """One batch of the import's current phase, committed with the row's progress. False once
    the import is done."""
    with transaction.atomic():
        # Two processes resuming one import: the second waits here, then goes on from the
        # cursor the first committed, so no batch is applied twice.
        made = StatementImport.objects.select_for_update().get(pk=import_id)
        if made.phase == Phase.DONE:
            return False
        with connection.cursor() as cursor:
            lock_tool(cursor, made.tool)
        tool = Tool.objects.get(name=made.tool)
        progress = phases[made.phase](made, tool)
        order = [*phases, Phase.DONE]
        changes: dict[str, Any] = {
            name: F(name) + count for name, count in progress.counts.items() if count
        }
        if progress.cursor is None:
            changes["phase"] = order[order.index(made.phase) + 1]
            changes["cursor"] = ""
            if changes["phase"] == Phase.DONE:
                changes["finished_at"] = Now()
        else:
            changes["cursor"] = progress.cursor
            changes["batches"] = F("batches") + 1
        StatementImport.objects.filter(pk=import_id).update(**changes)
    return True


# --- Lines -----------------------------------------------------------------------------------

# An effect as `verdicts` reads it, with all its current lines, for each effect of a `batch`
# (a CTE of effect ids the query that uses it defines).
EFFECT_FACTS = f"""
    SELECT e.id, e.status, e.version, e.kind, e.tool, e.attempt, e.max_attempts,
           e.provider_ref, e.amount_minor, e.currency,
           coalesce(e.status = 'dispatching' AND e.lease_expires_at < now(), false),
           e.status IN ('dispatching', 'unknown') AND {receipt_sql("e")},
           CASE WHEN e.attempt >= 2 THEN (
               SELECT max(c.created_at) FROM {_EVENTS} c WHERE c.effect_id = e.id
                  AND c.kind = 'transition' AND c.to_status = 'dispatching') END,
           (SELECT json_agg(json_build_array(l.id, l.statement_id, l.line_no, l.provider_ref,
                                             l.type, l.status, l.amount_minor, l.currency,
                                             l.occurred_at) ORDER BY l.occurred_at, l.id)
              FROM {_LINES} l WHERE l.effect_id = e.id AND l.removed_by_id IS NULL)
      FROM batch JOIN {_EFFECTS} e ON e.id = batch.effect_id
     ORDER BY e.id
"""
_EFFECTS_OF_BATCH = f"""
    WITH batch AS (
        SELECT DISTINCT effect_id FROM (
            SELECT effect_id FROM {_LINES}
             WHERE statement_id = %(import)s AND effect_id IS NOT NULL AND outcome = ''
               AND effect_id > %(after)s::uuid
             ORDER BY effect_id LIMIT %(limit)s) first_lines
    )
    {EFFECT_FACTS}"""


def facts(row: tuple[Any, ...]) -> tuple[EffectFact, list[LineFact]]:
    *values, lines = row
    effect = EffectFact(*values)
    parsed = [
        LineFact(i, s, n, ref, kind, status, amount, currency, datetime.fromisoformat(at))
        for i, s, n, ref, kind, status, amount, currency, at in lines or []
    ]
    return effect, parsed


def lines_phase(made: StatementImport, tool: Tool) -> Progress:
    with connection.cursor() as cursor:
        cursor.execute(
            _EFFECTS_OF_BATCH,
            {"import": made.pk, "after": made.cursor or FIRST_UUID, "limit": BATCH},
        )
        rows = cursor.fetchall()
    if not rows:
        return Progress(None)
    skew = skew_of(tool)
    moves: list[Move] = []
    others: list[tuple[EffectFact, Verdict]] = []
    for row in rows:
        effect, lines = facts(row)
        verdict = verdicts.verdict_on(effect, lines, skew)
        if verdict.action in (verdicts.CONFIRM, verdicts.FAIL):
            moves.append(move_of(made.pk, effect, verdict))
        elif verdict.action != verdicts.AGREES:
            others.append((effect, verdict))
    counts, outcomes = apply_moves(moves)
    for effect, verdict in others:
        counted = _flag(made, effect, verdict)
        if counted:
            counts[counted] = counts.get(counted, 0) + 1
        for line in verdict.lines:
            outcomes[line.id] = "held" if verdict.action == verdicts.HELD else verdict.action
    set_outcomes(outcomes)
    return Progress(str(rows[-1][0]), counts)


def apply_moves(moves: list[Move]) -> tuple[dict[str, int], dict[int, str]]:
    """The statement's moves, each only if its effect can still move; the counts by outcome,
    and each moved effect's lines with what they did."""
    counts: dict[str, int] = {}
    outcomes: dict[int, str] = {}
    moved = transition_many(moves, actor=ACTOR, where=MOVABLE_WHERE) if moves else set()
    for move in moves:
        if move.effect.id not in moved:
            log.info("effect %s changed while its statement lines were applied", move.effect.id)
            continue
        name = "confirmed" if move.to == Status.CONFIRMED else "failed"
        counts[name] = counts.get(name, 0) + 1
        for line_id in move.data["lines"]:
            outcomes[line_id] = name
    return counts, outcomes


def _evidence(statement: int, verdict: Verdict) -> dict[str, Any]:
    data: dict[str, Any] = {
        "statement": statement,
        "verdict": verdict.action,
        "why": verdict.why,
        "statement_lines": [line.shown() for line in verdict.lines],
    }
    if verdict.mismatches:
        data["mismatches"] = list(verdict.mismatches)
    if verdict.unchecked:
        data["unchecked"] = list(verdict.unchecked)
    return data


def move_of(statement: int, effect: EffectFact, verdict: Verdict) -> Move:
    """The move a confirming or failing verdict makes, with its statement event ahead."""
    evidence = _evidence(statement, verdict)
    to = Status.CONFIRMED if verdict.action == verdicts.CONFIRM else Status.FAILED
    ref = verdict.record.provider_ref if verdict.record else verdict.lines[-1].provider_ref
    before = event_values(
        kind=EventKind.STATEMENT,
        actor=ACTOR,
        from_status=effect.status,
        to_status=effect.status,
        reason=verdict.action,
        data=evidence,
    )
    return Move(
        Effect(id=effect.id, status=effect.status, version=effect.version, kind=effect.kind),
        to,
        reason="statement_line",
        changes={"provider_ref": ref},
        data={
            "provider_ref": ref,
            "statement": statement,
            "lines": [line.id for line in verdict.lines],
        },
        before=[before],
    )


def _flag(made: StatementImport, effect: EffectFact, verdict: Verdict) -> str | None:
    """A verdict that moves nothing: its event, and the review or duplicate it opens. Returns
    the count it adds to ("duplicates", "reviews"), if any."""
    evidence = _evidence(made.pk, verdict)
    if verdict.action == verdicts.DUPLICATE:
        report_duplicate(
            effect.id,
            effect.tool,
            status=effect.status,
            actor=ACTOR,
            kind=EventKind.STATEMENT,
            evidence=evidence,
        )
        return "duplicates"
    record_event(
        effect.id,
        kind=EventKind.STATEMENT,
        actor=ACTOR,
        from_status=effect.status,
        to_status=effect.status,
        reason=verdict.action,
        data=evidence,
    )
    reason = {
        verdicts.AMOUNT_MISMATCH: Reason.AMOUNT_MISMATCH,
        verdicts.CONTRADICTS: Reason.STATEMENT_CONTRADICTS,
    }.get(verdict.action)
    if reason is None:
        return None
    open_review(effect.id, reason)
    return "reviews"


def set_outcomes(outcomes: dict[int, str]) -> None:
    if not outcomes:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_LINES} l SET outcome = v.outcome "
            "FROM unnest(%s::bigint[], %s::text[]) AS v(id, outcome) WHERE l.id = v.id",
            [list(outcomes), list(outcomes.values())],
        )


# --- Removals --------------------------------------------------------------------------------


def removals_phase(made: StatementImport, tool: Tool) -> Progress:
    """Effects whose applied lines this revision removed: a person looks (the provider no
    longer lists what the ledger may have acted on)."""
    after = int(made.cursor or 0)
    lines = list(
        StatementLine.objects.filter(
            removed_by=made, outcome="removed", effect__isnull=False, pk__gt=after
        )
        .order_by("pk")
        .values("pk", "effect_id", "statement_id", "line_no", "provider_ref", "type")[:BATCH]
    )
    if not lines:
        return Progress(None)
    statuses = dict(
        Effect.objects.filter(pk__in={line["effect_id"] for line in lines}).values_list(
            "pk", "status"
        )
    )
    for line in lines:
        status = statuses.get(line["effect_id"], "")
        record_event(
            line["effect_id"],
            kind=EventKind.STATEMENT,
            actor=ACTOR,
            from_status=status,
            to_status=status,
            reason=Reason.STATEMENT_LINE_REMOVED.value,
            data={
                "statement": made.pk,
                "removed": {
                    "statement": line["statement_id"],
                    "line": line["line_no"],
                    "provider_ref": line["provider_ref"],
                    "type": line["type"],
                },
            },
        )
        open_review(line["effect_id"], Reason.STATEMENT_LINE_REMOVED)
    return Progress(str(lines[-1]["pk"]), {"reviews": len(lines)})
