"""What an active halt covers, and the refusal a claim it covers meets.

**What a halt covers** is written once, as the SQL function `ledger_covering_halt`
(`ledger/sql/halts.sql`): a tool halt stops every effect of its tool; agent, run and `all`
halts stop actions and the agent's own compensations, and the compensations an operator decided
only when the halt says `include_compensations` (halting the agent that double-charged must not
stop its refunds, and must not leave it a way round the halt). A run halt covers that run_id
for every agent, unless it names `teams`: then only the run's agents of those teams and agents
of no team (a person scoped to teams halts their own agents' part of a run, never another
team's; ADR 0014). Decisions are never claimed and never covered. The claim
(`ledger.effects.transitions.claim`) asks `claim_refusal` inside its transaction; the trigger on
`planned → dispatching` asks again, so that a process that knows nothing of halts is stopped too.

Halting and resuming, which act and are recorded, are `ledger.containment.halts`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connection

from ledger.errors import Halted
from ledger.models import Effect, Halt, HaltScope, Team

# The key of the advisory lock that orders halts against claims ("halt" in ASCII). The claim
# trigger's function `ledger_halt_for_claim` (`ledger/sql/halts.sql`) takes it shared; `halt()`
# takes it exclusively. tests/test_halts.py checks that the two agree.
HALT_LOCK = int.from_bytes(b"halt")
# What the trigger raises (SQLSTATE P0001, the halt as JSON in DETAIL; Django's
# ProgrammingError, as psycopg files PL/pgSQL errors).
TRIGGER_MESSAGE = "ledger_halted"

_EFFECTS = Effect._meta.db_table
_HALTS = Halt._meta.db_table


def covering_sql(effect: str) -> str:
    """SQL: the id of the active halt covering the effect aliased `effect`, or NULL."""
    return (
        f"ledger_covering_halt({effect}.kind, {effect}.tool, {effect}.agent_id, {effect}.run_id, "
        f"{effect}.requested_by)"
    )


def shown(halt: Halt) -> dict[str, Any]:
    """A halt as the API shows it (409 `halted`, heartbeat answers): the `halt` of docs/api.md."""
    return {
        "scope": halt.scope,
        "value": halt.value,
        "reason": halt.reason,
        "by": halt.halted_by,
        "since": halt.since,
    }


def team_names(ids: Iterable[int] | None) -> list[str] | None:
    """The names of a halt's teams, in the order of their ids (a deleted team by its id); None
    for a halt of every agent."""
    if ids is None:
        return None
    names = dict(Team.objects.filter(pk__in=list(ids)).values_list("pk", "name"))
    return [names.get(i, f"team {i}") for i in ids]


def whose(halt: Halt) -> str:
    """Whose agents a halt covers, in words: "" for every agent's."""
    names = team_names(halt.teams)
    if names is None:
        return ""
    return f"agents of {', '.join(names) or 'no listed team'} and of no team"


def described(halt: Halt) -> str:
    what = "everything" if halt.scope == HaltScope.ALL else f"{halt.scope} {halt.value!r}"
    if whose(halt):
        what = f"{what}, {whose(halt)}"
    return f"Claims are halted ({what}, by {halt.halted_by}): {halt.reason}"


def refusal(halt: Halt) -> Halted:
    return Halted(described(halt), halt=shown(halt))


def active_halt_for(effect: Effect) -> Halt | None:
    """The active halt covering `effect` (the oldest, if several do), or None. No lock: for
    answers that only inform (heartbeats, the pages); a claim asks `claim_refusal`."""
    return next(
        iter(
            Halt.objects.raw(
                f"SELECT * FROM {_HALTS} WHERE id = ledger_covering_halt(%s, %s, %s, %s, %s)",
                [effect.kind, effect.tool, effect.agent_id, effect.run_id, effect.requested_by],
            )
        ),
        None,
    )


def claim_refusal(effect: Effect) -> Halted | None:
    """Inside a claim's transaction: take the halts' lock shared, then the refusal if a halt
    covers `effect`. Until the transaction ends, no halt can commit (`halt()` waits for it)."""
    with connection.cursor() as cursor:
        # One statement: the function takes the lock and then checks in a statement of its own,
        # which sees a halt committed while this one waited for the lock.
        cursor.execute(
            "SELECT ledger_halt_for_claim(%s, %s, %s, %s, %s)",
            [effect.kind, effect.tool, effect.agent_id, effect.run_id, effect.requested_by],
        )
        halt_id = cursor.fetchone()[0]
    if halt_id is None:
        return None
    return refusal(Halt.objects.get(pk=halt_id))


def halted_among(effect_ids: Iterable[Any]) -> set[str]:
    """Which of these effects an active halt covers, in one query (`/recovery`)."""
    ids = list(effect_ids)
    if not ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id FROM {_EFFECTS} e "
            f"WHERE e.id = ANY(%s) AND {covering_sql('e')} IS NOT NULL",
            [ids],
        )
        return {str(row[0]) for row in cursor.fetchall()}


def refusal_from_trigger(exc: DatabaseError) -> Halted | None:
    """The 409 for the claim trigger's error, or None for any other database error. Only a
    claim that skipped `claim_refusal` (no such path in this code) can meet the trigger."""
    diag = getattr(exc.__cause__, "diag", None)
    if diag is None or diag.message_primary != TRIGGER_MESSAGE:
        return None
    halt = json.loads(diag.message_detail or "{}")
    since = datetime.fromisoformat(halt["since"]) if halt.get("since") else None
    shown_halt = {
        "scope": halt.get("scope"),
        "value": halt.get("value"),
        "reason": halt.get("reason"),
        "by": halt.get("by"),
        "since": since,
    }
    return Halted("Claims of this effect are halted.", halt=shown_halt)


def active_halts() -> list[Halt]:
    """Every active halt, oldest first (the banner, the halts page, the shell)."""
    return list(Halt.objects.filter(resumed_at__isnull=True).order_by("since", "id"))
