"""Orphans: statement lines that no effect intended, possible unauthorized charges.

A successful or pending charge, capture or refund line whose reference names no effect of the
tool is an orphan only once the *next* period's final statement is in as well (one that starts
at or before this statement's end and ends after it): until then the line may still be
revised away, and an effect may still be on its way. Each orphan opens one `Incident` (high
severity for a successful line, normal for a pending one), due within the tool's
`resolve_within` or LEDGER_RESOLVE_WITHIN, or sooner when the provider's back-office window,
counted from the line's time, closes first (`ledger.rules.reviewqueue.due_sql`). A person
closes it with `acknowledge_incident`, recorded as a decision effect under the reserved system agent
(run
`incidents`, target "incident:<id>"), like a halt.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Now

from ledger.containment.halts import system_agent
from ledger.effects.decision_records import record_standalone_decision
from ledger.errors import NotFound, Refused, ValidationFailed
from ledger.models import (
    Alert,
    AlertKind,
    Incident,
    IncidentKind,
    LineStatus,
    LineType,
    Severity,
    StatementImport,
    StatementLine,
    Tool,
)
from ledger.policy.redaction import scrub_cards
from ledger.rules.reviewqueue import due_sql
from ledger.statements.apply import Progress

DECISIONS_RUN = "incidents"
_IMPORTS = StatementImport._meta.db_table
_LINES = StatementLine._meta.db_table
_INCIDENTS = Incident._meta.db_table
_TOOLS = Tool._meta.db_table
_ALERTS = Alert._meta.db_table
_MONEY = [LineType.CHARGE.value, LineType.CAPTURE.value, LineType.REFUND.value]
# A statement whose next period's final statement is in (`n`): its orphans can be told.
_NEXT_IS_IN = f"""EXISTS (SELECT 1 FROM {_IMPORTS} n
    WHERE n.tool = i.tool AND NOT n.provisional AND n.id <> i.id
      AND n.period_start <= i.period_end AND n.period_end > i.period_end)"""


class AlreadyAcknowledged(Refused):
    code = "already_acknowledged"


def orphans_phase(made: StatementImport, tool: Tool) -> Progress:
    """Open the incidents of every statement of the tool whose next period is now in (this
    import may be that next period for earlier ones, or itself have a next one already)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH ready AS (
                UPDATE {_IMPORTS} i SET orphans_checked = true
                 WHERE i.tool = %(tool)s AND NOT i.orphans_checked AND {_NEXT_IS_IN}
                RETURNING i.id
            ), opened AS (
                INSERT INTO {_INCIDENTS} (kind, tool, line_id, severity, opened_at, due_at, note)
                SELECT %(kind)s, %(tool)s, l.id,
                       CASE WHEN l.status = %(succeeded)s THEN %(high)s ELSE %(normal)s END,
                       now(), {due_sql("t", "l.occurred_at")}, ''
                  FROM ready JOIN {_LINES} l ON l.statement_id = ready.id
                  LEFT JOIN {_TOOLS} t ON t.name = %(tool)s
                 WHERE l.effect_id IS NULL AND l.removed_by_id IS NULL
                   AND l.type = ANY(%(money)s) AND l.status <> %(failed)s
                ON CONFLICT (line_id) DO NOTHING
                RETURNING id, line_id, severity
            ), marked AS (
                UPDATE {_LINES} l SET outcome = 'orphan' FROM opened WHERE l.id = opened.line_id
            ), alerted AS (
                -- People hear of each at once, through the alert outbox.
                INSERT INTO {_ALERTS} (id, kind, key, payload, created_at, attempts, delivered,
                                       last_error)
                SELECT gen_random_uuid(), %(alert)s, 'incident:' || opened.id,
                       jsonb_build_object(
                           'summary', 'statement line ' || l.provider_ref || ' of ' || %(tool)s
                                      || ': no effect intended it',
                           'link', '/incidents/', 'incident', opened.id, 'tool', %(tool)s,
                           'provider_ref', l.provider_ref, 'amount_minor', l.amount_minor,
                           'currency', l.currency, 'severity', opened.severity),
                       now(), 0, '[]'::jsonb, ''
                  FROM opened JOIN {_LINES} l ON l.id = opened.line_id
                ON CONFLICT (kind, key) DO NOTHING
            )
            SELECT count(*) FROM opened
            """,
            {
                "tool": tool.name,
                "kind": IncidentKind.ORPHAN.value,
                "succeeded": LineStatus.SUCCEEDED.value,
                "failed": LineStatus.FAILED.value,
                "high": int(Severity.HIGH),
                "normal": int(Severity.NORMAL),
                "money": _MONEY,
                "alert": AlertKind.INCIDENT_OPENED.value,
            },
        )
        opened = cursor.fetchone()[0]
    return Progress(None, {"orphans": opened})


def incident_queue() -> QuerySet[Incident]:
    """Open incidents in the order people should take them: gravest, then soonest due
    (served by incident_open_idx)."""
    return (
        Incident.objects.filter(acknowledged_at__isnull=True)
        .select_related("line")
        .order_by(F("severity").desc(), "due_at", "id")
    )


def record_acknowledgement(
    incident: Incident, *, actor: str, note: str, user: Any = None, asked: dict | None = None
) -> None:
    """Close `incident` (locked, still open) with `note`, recorded as a decision effect of
    `actor` in the caller's transaction; `user` is the person, None for a machine."""
    line = incident.line
    details = {
        "incident": incident.pk,
        "kind": incident.kind,
        "tool": incident.tool,
        "provider_ref": line.provider_ref,
        "type": line.type,
        "amount_minor": line.amount_minor,
        "currency": line.currency,
        "statement": line.statement_id,
        "line": line.line_no,
    }
    decision = record_standalone_decision(
        system_agent(),
        target=f"incident:{incident.pk}",
        run_id=DECISIONS_RUN,
        key=f"incident:{incident.pk}:decision:acknowledge",
        action="acknowledge",
        reason=note,
        asked=asked or {"incident": incident.pk, "note": note},
        actor=actor,
        details=details,
    )
    Incident.objects.filter(pk=incident.pk).update(
        acknowledged_at=Now(),
        acknowledged_by=user,
        note=note,
        decision_id=decision.pk if decision else None,
    )


def acknowledge_incident(incident_id: int, *, user: Any, note: str) -> Incident:
    """Close an open incident with a person's note, recorded as a decision effect in the same
    transaction. `NotFound` for no such incident; `AlreadyAcknowledged` (409) naming who did
    when someone else was first; `ValidationFailed` for an empty or overlong note."""
    # Typed by a person: a card number in it is tokenized like any stored text.
    note = scrub_cards((note or "").strip())
    if not note or len(note) > 2000:
        raise ValidationFailed("Say what was found.", {"note": "1 to 2000 characters"})
    actor = f"operator:{user.get_username()}"
    with transaction.atomic():
        # Two people acknowledging at once: the second waits here, then is told who was first.
        incident = (
            Incident.objects.select_for_update().select_related("line").filter(pk=incident_id)
        ).first()
        if incident is None:
            raise NotFound("No such incident.")
        if incident.acknowledged_at is not None:
            who = incident.acknowledged_by.get_username() if incident.acknowledged_by else "?"
            raise AlreadyAcknowledged(
                f"Incident {incident_id} was acknowledged by {who} at "
                f"{incident.acknowledged_at.isoformat()}."
            )
        record_acknowledgement(incident, actor=actor, note=note, user=user)
    incident.refresh_from_db()
    return incident
