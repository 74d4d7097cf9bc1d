"""The kill switch: halting and resuming claims, each recorded as a decision.

A halt and its decision (an effect of kind `decision` under the reserved agent `system`, run
`halts`, target "halt:<scope>:<value>") commit together, with the alert that tells people. What a
halt covers and how claims are refused is in `ledger.halts` and `ledger/sql/halts.sql`.

Commit order: `halt` takes the halts' advisory lock exclusively before it inserts. Every claim
takes it shared before it checks for halts, so `halt` waits for the claims that have checked and
not yet committed, and claims arriving meanwhile wait for `halt` and then see it. Once `halt`
has returned, no claim it covers can commit.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models.functions import Now

from ledger import outbox
from ledger.agentkeys import SYSTEM_AGENT
from ledger.decisions import record_standalone_decision
from ledger.errors import NotFound, ValidationFailed
from ledger.halts import HALT_LOCK, shown
from ledger.models import Agent, AlertKind, Halt, HaltScope
from ledger.redaction import scrub_cards

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


def _target(halt: Halt) -> str:
    return f"halt:{halt.scope}:{halt.value}"


def halt(
    scope: str, value: str, *, reason: str, by: str, include_compensations: bool = False
) -> Switched:
    """Halt claims of a tool, an agent, a run_id or everything. An active halt of the same
    subject is returned unchanged (`changed` False)."""
    scope, value = subject(scope, value)
    reason = _reason(reason)
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Exclusive: waits for claims that passed their check and have not committed yet.
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [HALT_LOCK])
        existing = Halt.objects.filter(scope=scope, value=value, lifted_at__isnull=True).first()
        if existing is not None:
            return Switched(existing, False)
        made = Halt.objects.create(
            scope=scope,
            value=value,
            reason=reason,
            halted_by=by[:200],
            include_compensations=include_compensations,
        )
        details = {"halt": made.pk, "include_compensations": include_compensations}
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
        outbox.notify(AlertKind.HALT, str(made.pk), {**shown(made), "id": made.pk})
    return Switched(made, True)


def active(scope: str, value: str) -> Halt:
    """The active halt of this subject, or `NotFound`."""
    scope, value = subject(scope, value)
    found = Halt.objects.filter(scope=scope, value=value, lifted_at__isnull=True).first()
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
        details = {"halt": found.pk}
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
    return Switched(found, True)
