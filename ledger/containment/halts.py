"""Halting and resuming: each recorded as a decision, an effect of kind `decision` under the
reserved agent `system`, run `halts`, target "halt:<scope>:<value>", committed together with
the halt and the alert that tells people. What an active halt covers, and the refusal a
claim meets, is `ledger.rules.halts`.

**Commit order:** `halt` takes the halts' advisory lock exclusively before it inserts. Every
claim takes it shared before it checks for halts, so `halt` waits for the claims that have
checked and not yet committed, and claims arriving meanwhile wait for `halt` and then see it.
Once `halt` has returned, no claim it covers can commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from ledger.audit import witness
from ledger.effects.decision_records import record_standalone_decision
from ledger.errors import NotFound, ValidationFailed
from ledger.models import Agent, AlertKind, Halt, HaltScope
from ledger.policy.agentkeys import SYSTEM_AGENT
from ledger.policy.redaction import scrub_cards
from ledger.rules import outbox
from ledger.rules.halts import HALT_LOCK, shown, team_names

# The system agent's run under which halts and resumes are recorded.
DECISIONS_RUN = "halts"
_MAX_VALUE = {HaltScope.TOOL: 100, HaltScope.AGENT: 100, HaltScope.RUN: 200}


@dataclass(frozen=True)
class Switched:
    halt: Halt
    # False: the halt was active already (halt) or resumed already (resume); nothing recorded.
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
        same = Halt.objects.filter(
            scope=scope, value=value, teams=narrowed, resumed_at__isnull=True
        )
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
        record_standalone_decision(
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
        Halt.objects.filter(scope=scope, value=value, resumed_at__isnull=True)
        .order_by(F("teams").asc(nulls_first=True), "since", "id")
        .first()
    )
    if found is None:
        what = "everything" if scope == HaltScope.ALL else f"{scope} {value!r}"
        raise NotFound(f"No active halt of {what}.")
    return found


def resume(halt_id: int, *, reason: str, by: str, channel: str = "") -> Switched:
    """Resume a halt. Resuming one already resumed records nothing (`changed` False); two
    operators resuming at once: exactly one records the decision. `channel`: where the person
    decided it ("page", "slack"), recorded with the decision when given."""
    reason = _reason(reason)
    with transaction.atomic():
        resumed = Halt.objects.filter(pk=halt_id, resumed_at__isnull=True).update(
            resumed_at=Now(), resumed_by=by[:200]
        )
        found = Halt.objects.filter(pk=halt_id).first()
        if found is None:
            raise NotFound("No such halt.")
        if not resumed:
            return Switched(found, False)
        details = {"halt": found.pk, "teams": found.teams, "team_names": team_names(found.teams)}
        if channel:
            details["channel"] = channel
        record_standalone_decision(
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
