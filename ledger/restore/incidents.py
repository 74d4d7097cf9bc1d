"""Incidents the restore sweep raises, and closes once the record is explained.

A provider record in the lost window that no effect names is raised as an incident through the
orphans' path (`ledger.statements.orphans`), with its alert: a charge whose intent was lost, or
worse. Most are the first: the agent whose intent the ledger lost posts its run again, and the
effect recorded then carries the same idempotency key (keys derive from the run, the step and
the agent), or a lookup later reports the provider's reference. While restore mode is on, the
sweep looks again each minute and closes, as a decision of `system:restore`, every incident of
the window whose record an effect now names, saying which. What stays open is what a person
must look at.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, transaction
from django.db.models import Q

from ledger.models import (
    AlertKind,
    Effect,
    Incident,
    IncidentKind,
    LineStatus,
    RestoreWindow,
    Severity,
    StatementLine,
    Tool,
)
from ledger.rules import outbox
from ledger.rules.reviewqueue import due_sql
from ledger.statements.orphans import record_acknowledgement

ACTOR = "system:restore"


def sweep_name(window: RestoreWindow, tool: str) -> str:
    """The file name of a tool's sweep of a window (a provisional statement of origin sweep)."""
    return f"restore-window-{window.pk}-{tool}"


def _of_window(window: RestoreWindow) -> Q:
    return Q(line__statement__filename__startswith=f"restore-window-{window.pk}-")


def _due(tool: Tool, lines: Sequence[StatementLine]) -> dict[int, object]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT l.id, {due_sql('t', 'l.occurred_at')} "
            f"FROM {StatementLine._meta.db_table} l, {Tool._meta.db_table} t "
            "WHERE t.name = %s AND l.id = ANY(%s)",
            [tool.name, [line.pk for line in lines]],
        )
        return dict(cursor.fetchall())


def raise_for(window: RestoreWindow, tool: Tool, orphans: Sequence[StatementLine]) -> int:
    """An incident, with its alert, for each line no effect explains, unless another tool's
    sweep of the window raised one for the same record (a charge and its refund are served by
    one provider, which lists both to each). Returns how many were raised."""
    if not orphans:
        return 0
    raised = set(
        Incident.objects.filter(
            _of_window(window), line__provider_ref__in=[line.provider_ref for line in orphans]
        ).values_list("line__provider_ref", flat=True)
    )
    due = _due(tool, orphans)
    made = Incident.objects.bulk_create(
        Incident(
            kind=IncidentKind.ORPHAN,
            tool=tool.name,
            line=line,
            severity=Severity.HIGH if line.status == LineStatus.SUCCEEDED else Severity.NORMAL,
            due_at=due[line.pk],
            note="Found by the restore window sweep: no effect in the ledger names it.",
        )
        for line in orphans
        if line.provider_ref not in raised
    )
    for incident in made:
        line = incident.line
        outbox.notify(
            AlertKind.INCIDENT_OPENED,
            f"incident:{incident.pk}",
            {
                "summary": f"{line.type} {line.provider_ref} of {tool.name} in a window the "
                "ledger lost: no effect names it",
                "link": "/incidents/",
                "incident": incident.pk,
                "tool": tool.name,
                "provider_ref": line.provider_ref,
                "amount_minor": line.amount_minor,
                "currency": line.currency,
                "severity": int(incident.severity),
            },
        )
    return len(made)


def close_explained(window: RestoreWindow) -> int:
    """Close each open incident of the window's sweeps whose record an effect now names (by the
    key the provider kept, or by its reference). Returns how many were closed."""
    open_ones = list(
        Incident.objects.filter(_of_window(window), acknowledged_at__isnull=True).select_related(
            "line"
        )
    )
    if not open_ones:
        return 0
    keys = [i.line.reference for i in open_ones if i.line.reference]
    refs = [i.line.provider_ref for i in open_ones]
    by_key: dict[str, str] = {}
    by_ref: dict[str, str] = {}
    for key, ref, pk in Effect.objects.filter(
        Q(idempotency_key__in=keys) | Q(provider_ref__in=refs)
    ).values_list("idempotency_key", "provider_ref", "pk"):
        by_key.setdefault(key, str(pk))
        if ref:
            by_ref.setdefault(ref, str(pk))
    closed = 0
    for incident in open_ones:
        line = incident.line
        effect = by_key.get(line.reference) or by_ref.get(line.provider_ref)
        if effect is not None and _close(incident, effect):
            closed += 1
    return closed


def _close(incident: Incident, effect: str) -> bool:
    line = incident.line
    note = f"Explained after the restore: effect {effect} names {line.type} {line.provider_ref}."
    with transaction.atomic():
        locked = (
            Incident.objects.select_for_update()
            .select_related("line")
            .filter(pk=incident.pk, acknowledged_at__isnull=True)
            .first()
        )
        if locked is None:
            return False  # a person acknowledged it meanwhile
        record_acknowledgement(
            locked, actor=ACTOR, note=note, asked={"incident": incident.pk, "effect": effect}
        )
    return True
