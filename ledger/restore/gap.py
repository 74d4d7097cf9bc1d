"""Accounting for the lost window: every record the provider holds from it, matched to an effect
or raised as an incident.

While restore mode is on, `reconcilers.gapsweep` asks each tool whose adapter can list a time
window for the provider's records from `lost_since` less the longest lease to the moment the
mode began, and hands the complete listing here. Each record is matched to an effect by the
idempotency key the provider kept for it, else by the provider's reference an outcome reported.
A record nothing in the ledger explains is what the lost window may hide (a charge whose intent
was lost) or worse: it opens an incident through the orphans' path, with its alert. The listing
is kept as a provisional statement of origin `sweep` (its lines, and which effect each matched),
so the incident page shows the provider's record; a sweep never proves absence (it is
provisional) and never revises a real statement of the same period.

What a sweep found is recorded on the window (`applied["swept"][tool]`); restore mode does not
end by itself before every tool due a sweep has one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger.containment import outbox
from ledger.containment.reviewqueue import due_sql
from ledger.models import (
    AlertKind,
    Effect,
    EffectEvent,
    Incident,
    IncidentKind,
    LineStatus,
    RestoreWindow,
    Severity,
    StatementImport,
    StatementLine,
    Tool,
)
from ledger.models.statements import Origin, Phase
from ledger.restore.state import longest_lease
from ledger.statements.apply import skew_of

ACTOR = "system:restore"
# The reason of the move into `unknown` that entering restore mode makes (`mode.REASON`).
REASON = "restored_gap"


class Record(Protocol):
    provider_ref: str
    reference: str
    type: str
    status: str
    amount_minor: int
    currency: str
    occurred_at: datetime


def _sweep_name(window: RestoreWindow, tool: str) -> str:
    return f"restore-window-{window.pk}-{tool}"


def _digest(records: Sequence[Record]) -> str:
    rows = [
        [r.provider_ref, r.reference, r.type, r.status, r.amount_minor, r.currency,
         r.occurred_at.isoformat()]
        for r in records
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def _explained_by(record: Record) -> Effect | None:
    """The effect a record belongs to: by the key the provider kept, else by its reference."""
    if record.reference:
        found = Effect.objects.filter(idempotency_key=record.reference).order_by("pk").first()
        if found is not None:
            return found
    return Effect.objects.filter(provider_ref=record.provider_ref).order_by("pk").first()


def _raised_already(window: RestoreWindow, record: Record) -> bool:
    """Tools served by one provider (a charge and its refund) list the same records: one
    incident per record and window."""
    return Incident.objects.filter(
        line__statement__filename__startswith=f"restore-window-{window.pk}-",
        line__provider_ref=record.provider_ref,
    ).exists()


def _open_incident(tool: Tool, line: StatementLine) -> Incident:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {due_sql('t', '%(at)s')} FROM {Tool._meta.db_table} t WHERE t.name = %(tool)s",
            {"at": line.occurred_at, "tool": tool.name},
        )
        (due,) = cursor.fetchone()
    incident = Incident.objects.create(
        kind=IncidentKind.ORPHAN,
        tool=tool.name,
        line=line,
        severity=Severity.HIGH if line.status == LineStatus.SUCCEEDED else Severity.NORMAL,
        due_at=due,
        note="Found by the restore window sweep: no effect in the ledger names it.",
    )
    outbox.notify(
        AlertKind.INCIDENT_OPENED,
        f"incident:{incident.pk}",
        {
            "summary": f"{line.type} {line.provider_ref} of {tool.name} in a window the ledger "
            "lost: no effect names it",
            "link": "/incidents/",
            "incident": incident.pk,
            "tool": tool.name,
            "provider_ref": line.provider_ref,
            "amount_minor": line.amount_minor,
            "currency": line.currency,
            "severity": int(incident.severity),
        },
    )
    return incident


def account_for(
    window: RestoreWindow, tool: Tool, start: datetime, end: datetime, records: Sequence[Record]
) -> dict[str, int]:
    """Match a complete listing of [start, end) to effects; an incident for every record no
    effect explains. Done once per window and tool: a repeat returns what the first found."""
    with transaction.atomic():
        window = RestoreWindow.objects.select_for_update().get(pk=window.pk)
        swept = window.applied.setdefault("swept", {})
        if tool.name in swept:
            return swept[tool.name]
        sweep = StatementImport.objects.create(
            tool=tool.name,
            filename=_sweep_name(window, tool.name),
            sha256=_digest(records),
            period_start=start,
            period_end=end,
            provisional=True,
            origin=Origin.SWEEP,
            imported_by=ACTOR,
            phase=Phase.DONE,
            finished_at=timezone.now(),
            orphans_checked=True,
            lines=len(records),
        )
        counts = {"records": len(records), "matched": 0, "incidents": 0}
        for number, record in enumerate(records, start=1):
            effect = _explained_by(record)
            line = StatementLine.objects.create(
                statement=sweep,
                line_no=number,
                provider_ref=record.provider_ref,
                reference=record.reference,
                type=record.type,
                status=record.status,
                amount_minor=record.amount_minor,
                currency=record.currency,
                occurred_at=record.occurred_at,
                effect=effect,
                outcome="matched" if effect else "orphan",
            )
            if effect is not None:
                counts["matched"] += 1
            elif _raised_already(window, record):
                counts["raised by another tool's sweep"] = (
                    counts.get("raised by another tool's sweep", 0) + 1
                )
            else:
                _open_incident(tool, line)
                counts["incidents"] += 1
        sweep.lines_matched, sweep.orphans = counts["matched"], counts["incidents"]
        sweep.save(update_fields=["lines_matched", "orphans"])
        swept[tool.name] = {**counts, "import": sweep.pk, "at": timezone.now().isoformat()}
        window.save(update_fields=["applied"])
    return counts


def sweeps_due(window: RestoreWindow, tools: Sequence[str]) -> None:
    """Record which tools must be swept before the window may end by itself."""
    with transaction.atomic():
        window = RestoreWindow.objects.select_for_update().get(pk=window.pk)
        if window.applied.get("sweeps_due") != sorted(tools):
            window.applied["sweeps_due"] = sorted(tools)
            window.save(update_fields=["applied"])


def statement_bounds(window: RestoreWindow, tool: Tool) -> tuple[datetime, datetime]:
    """What a tool's final statements must cover for the window: every moment a copy of an
    effect on the lost branch could have reached the provider. From `lost_since` less the
    longest lease (a claim taken that long before) to `started_at` plus the longest lease (a
    lease taken on the lost branch just before the mode began may still be used to send), plus
    the tool's `settle_after`; widened by the statement skew at both ends. Absence from
    statements is proven for an effect in doubt over the same range
    (`ledger.statements.absence`)."""
    skew = skew_of(tool)
    settle = tool.settle_after or timedelta(seconds=settings.LEDGER_SETTLE_AFTER)
    return (
        window.lost_since - longest_lease() - skew,
        window.started_at + longest_lease() + settle + skew,
    )


def statements_missing(window: RestoreWindow) -> list[str]:
    """Tools settled by statements (a final one was ever imported) that have no final statement
    covering the lost window yet (`statement_bounds`): absence in the window cannot be shown
    without one."""
    names = (
        StatementImport.objects.filter(provisional=False)
        .exclude(origin=Origin.SWEEP)
        .values_list("tool", flat=True)
        .distinct()
    )
    missing = []
    for tool in Tool.objects.filter(name__in=set(names)).order_by("name"):
        start, end = statement_bounds(window, tool)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT coalesce(range_agg(tstzrange(period_start, period_end, '[)')) "
                f"@> tstzrange(%s, %s, '[)'), false) FROM {StatementImport._meta.db_table} "
                "WHERE tool = %s AND NOT provisional AND origin <> %s",
                [start, end, tool.name, Origin.SWEEP.value],
            )
            if not cursor.fetchone()[0]:
                missing.append(tool.name)
    return missing


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


def unswept(window: RestoreWindow) -> list[str]:
    """Tools due a sweep that have none yet (all of them until the sweep has looked)."""
    if "sweeps_due" not in window.applied:
        return ["(the sweep has not run yet)"]
    swept = window.applied.get("swept", {})
    return [tool for tool in window.applied["sweeps_due"] if tool not in swept]
