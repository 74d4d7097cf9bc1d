"""Halts, the kill switch: what an active halt covers, and halting and resuming.

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

**Halting and resuming** (`halt`, `resume`) are each recorded as a decision: an effect of kind
`decision` under the reserved agent `system`, run `halts`, target "halt:<scope>:<value>",
committed together with the halt and the alert that tells people.

**Commit order:** `halt` takes the halts' advisory lock exclusively before it inserts. Every
claim takes it shared before it checks for halts, so `halt` waits for the claims that have
checked and not yet committed, and claims arriving meanwhile wait for `halt` and then see it.
Once `halt` has returned, no claim it covers can commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from ledger.audit.redaction import scrub_cards
from ledger.containment import outbox
from ledger.errors import Halted, NotFound, ValidationFailed
from ledger.models import Agent, AlertKind, Effect, Halt, HaltScope, Team
from ledger.policy.agentkeys import SYSTEM_AGENT
from ledger.restore import witness

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
    return list(Halt.objects.filter(lifted_at__isnull=True).order_by("since", "id"))


# --- Halting and resuming ------------------------------------------------------------------

# The system agent's run under which halts and resumes are recorded.
DECISIONS_RUN = "halts"
_MAX_VALUE = {HaltScope.TOOL: 100, HaltScope.AGENT: 100, HaltScope.RUN: 200}


@dataclass(frozen=True)
class Switched:
    halt: Halt
    # False: the halt was active already (halt) or lifted already (resume); nothing recorded.
    changed: bool


def system_agent() -> Agent:
    # Migration 0008 creates it; a flushed database (tests) may have lost it.
    return Agent.objects.get_or_create(name=SYSTEM_AGENT)[0]


def subject(scope: str, value: str) -> tuple[HaltScope, str]:
    """A valid (scope, value), or `ValidationFailed` naming what is wrong."""
    try:
        scope = HaltScope(scope)
    except ValueError:
        raise ValidationFailed(
            "Unknown halt scope.", {"scope": "one of tool, agent, run, all"}
        ) from None
    value = value.strip()
    if scope == HaltScope.ALL:
        if value:
            raise ValidationFailed("Halting everything names nothing.", {"value": "must be empty"})
        return scope, ""
    if not value or len(value) > _MAX_VALUE[scope]:
        raise ValidationFailed(
            f"Name the {scope} to halt.",
            {"value": f"1 to {_MAX_VALUE[scope]} characters"},
        )
    if scope == HaltScope.AGENT and not Agent.objects.filter(name=value).exists():
        raise ValidationFailed("No such agent.", {"value": f"no agent is named {value!r}"})
    return scope, value


def _reason(reason: str) -> str:
    # Typed by a person: a card number in it is tokenized like any stored text.
    reason = scrub_cards(reason.strip())
    if not reason or len(reason) > 2000:
        raise ValidationFailed("Give a reason.", {"reason": "1 to 2000 characters"})
    return reason


def _record_decision() -> Any:
    # Imported here: recording a decision goes through intents and transitions, and the claim
    # in transitions asks this module for its refusal.
    from ledger.effects.decision_records import record_standalone_decision

    return record_standalone_decision


def _target(halt: Halt) -> str:
    return f"halt:{halt.scope}:{halt.value}"


def _narrowed(scope: HaltScope, teams: Iterable[int] | None) -> list[int] | None:
    # Only a run halt is narrowed: a tool's or an agent's halt is about one team's thing already.
    return sorted({int(t) for t in teams}) if teams is not None and scope == HaltScope.RUN else None


def halt(
    scope: str,
    value: str,
    *,
    reason: str,
    by: str,
    include_compensations: bool = False,
    teams: Iterable[int] | None = None,
) -> Switched:
    """Halt claims of a tool, an agent, a run_id or everything. `teams` (ids; run halts only)
    narrows a run halt to the run's agents of those teams and of no team; None halts every
    agent's. An active halt of the same subject and teams is returned unchanged (`changed`
    False)."""
    scope, value = subject(scope, value)
    reason = _reason(reason)
    narrowed = _narrowed(scope, teams)
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Exclusive: waits for claims that passed their check and have not committed yet.
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [HALT_LOCK])
        same = Halt.objects.filter(scope=scope, value=value, teams=narrowed, lifted_at__isnull=True)
        existing = same.first()
        if existing is not None:
            return Switched(existing, False)
        made = Halt.objects.create(
            scope=scope,
            value=value,
            reason=reason,
            halted_by=by[:200],
            include_compensations=include_compensations,
            teams=narrowed,
        )
        details = {
            "halt": made.pk,
            "include_compensations": include_compensations,
            "teams": narrowed,
            "team_names": team_names(narrowed),
        }
        _record_decision()(
            system_agent(),
            target=_target(made),
            run_id=DECISIONS_RUN,
            key=f"halt:{made.pk}:decision:halt",
            action="halt",
            reason=reason,
            asked={"scope": scope, "value": value, **details},
            actor=by,
            details=details,
        )
        alert = {**shown(made), "id": made.pk, "teams": team_names(narrowed)}
        outbox.notify(AlertKind.HALT, str(made.pk), alert)
        witness.controls_changed()
    return Switched(made, True)


def active(scope: str, value: str) -> Halt:
    """The active halt of this subject (of every agent's first, then the oldest narrowed to
    teams), or `NotFound`."""
    scope, value = subject(scope, value)
    found = (
        Halt.objects.filter(scope=scope, value=value, lifted_at__isnull=True)
        .order_by(F("teams").asc(nulls_first=True), "since", "id")
        .first()
    )
    if found is None:
        what = "everything" if scope == HaltScope.ALL else f"{scope} {value!r}"
        raise NotFound(f"No active halt of {what}.")
    return found


def resume(halt_id: int, *, reason: str, by: str) -> Switched:
    """Lift a halt. Lifting one already lifted records nothing (`changed` False); two operators
    resuming at once: exactly one records the decision."""
    reason = _reason(reason)
    with transaction.atomic():
        lifted = Halt.objects.filter(pk=halt_id, lifted_at__isnull=True).update(
            lifted_at=Now(), lifted_by=by[:200]
        )
        found = Halt.objects.filter(pk=halt_id).first()
        if found is None:
            raise NotFound("No such halt.")
        if not lifted:
            return Switched(found, False)
        details = {"halt": found.pk, "teams": found.teams, "team_names": team_names(found.teams)}
        _record_decision()(
            system_agent(),
            target=_target(found),
            run_id=DECISIONS_RUN,
            key=f"halt:{found.pk}:decision:resume",
            action="resume",
            reason=reason,
            asked={"scope": found.scope, "value": found.value, **details},
            actor=by,
            details=details,
        )
        witness.controls_changed()
    return Switched(found, True)
