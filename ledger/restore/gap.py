"""Accounting for the lost window: every record the provider holds from it, matched to an effect
or raised as an incident.

While restore mode is on, `reconcilers.gapsweep` asks each tool whose adapter can list a time
window for the provider's records from `lost_since` less the longest lease to the moment the
mode began, and hands the complete listing here. Each record is matched to an effect by the
idempotency key the provider kept for it, else by the provider's reference an outcome reported.
A record nothing in the ledger explains is what the lost window may hide (a charge whose intent
was lost) or worse: it opens an incident (`ledger.restore.incidents`), closed by itself once an
effect posted again names the record. Matching takes a few queries per thousand records. The listing
is kept as a provisional statement of origin `sweep` (its lines, and which effect each matched),
so the incident page shows the provider's record; a sweep never proves absence (it is
provisional) and never revises a real statement of the same period.

What a sweep found is recorded on the window (`applied["swept"][tool]`); restore mode does not
end by itself before every tool due a sweep has one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger.models import (
    Effect,
    RestoreWindow,
    StatementImport,
    StatementLine,
    Tool,
)
from ledger.models.statements import Origin, Phase
from ledger.restore import incidents
from ledger.rules.restore_state import longest_lease
from ledger.statements.apply import skew_of

ACTOR = "system:restore"
CHUNK = 1000  # records matched and stored per batch (keys and references per query)
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


class _Digest:
    """The SHA-256 of the listing's rows as one JSON list, taken a batch at a time."""

    def __init__(self) -> None:
        self.sha256 = hashlib.sha256(b"[")
        self.first = True

    def add(self, records: Sequence[Record]) -> None:
        for r in records:
            row = [r.provider_ref, r.reference, r.type, r.status, r.amount_minor, r.currency,
                   r.occurred_at.isoformat()]  # fmt: skip
            self.sha256.update((("" if self.first else ", ") + json.dumps(row)).encode())
            self.first = False

    def hexdigest(self) -> str:
        done = self.sha256.copy()
        done.update(b"]")
        return done.hexdigest()


def _batches(records: Iterable[Record]) -> Iterator[list[Record]]:
    batch: list[Record] = []
    for record in records:
        batch.append(record)
        if len(batch) == CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def _explained(records: Sequence[Record]) -> dict[str, Any]:
    """Which effect explains each record, in two queries per batch of at most CHUNK records:
    by the key the provider kept for it, else by the provider's reference an outcome
    reported. Keyed by provider reference."""
    by_key: dict[str, Any] = {}
    by_ref: dict[str, Any] = {}
    keys = sorted({r.reference for r in records if r.reference})
    refs = sorted({r.provider_ref for r in records})
    for key, effect_id in (
        Effect.objects.filter(idempotency_key__in=keys)
        .order_by("-pk")
        .values_list("idempotency_key", "pk")
    ):
        by_key[key] = effect_id  # the first effect holding the key is kept (pk order)
    for ref, effect_id in (
        Effect.objects.filter(provider_ref__in=refs)
        .order_by("-pk")
        .values_list("provider_ref", "pk")
    ):
        by_ref[ref] = effect_id
    return {r.provider_ref: by_key.get(r.reference) or by_ref.get(r.provider_ref) for r in records}


def _store_lines(sweep: StatementImport, records: Iterable[Record]) -> tuple[int, str]:
    """The listing's records as the sweep's lines, each with the effect explaining it, a
    batch at a time (a listing may be streamed page by page: it is never held whole).
    Returns how many, and their digest."""
    digest, count = _Digest(), 0
    for batch in _batches(records):
        digest.add(batch)
        explained = _explained(batch)
        StatementLine.objects.bulk_create(
            StatementLine(
                statement=sweep,
                line_no=count + number,
                provider_ref=record.provider_ref,
                reference=record.reference,
                type=record.type,
                status=record.status,
                amount_minor=record.amount_minor,
                currency=record.currency,
                occurred_at=record.occurred_at,
                effect_id=explained[record.provider_ref],
                outcome="matched" if explained[record.provider_ref] else "orphan",
            )
            for number, record in enumerate(batch, start=1)
        )
        count += len(batch)
    return count, digest.hexdigest()


def _raise_incidents(window: RestoreWindow, tool: Tool, sweep: StatementImport) -> int:
    """An incident for every line of the sweep no effect explains, a batch at a time."""
    orphans = StatementLine.objects.filter(statement=sweep, effect__isnull=True).order_by("pk")
    raised, batch = 0, []
    for line in orphans.iterator(chunk_size=CHUNK):
        batch.append(line)
        if len(batch) == CHUNK:
            raised += incidents.raise_for(window, tool, batch)
            batch = []
    return raised + incidents.raise_for(window, tool, batch)


def account_for(
    window: RestoreWindow, tool: Tool, start: datetime, end: datetime, records: Iterable[Record]
) -> dict[str, int]:
    """Match a complete listing of [start, end) to effects; an incident for every record no
    effect explains. Done once per window and tool: a repeat returns what the first found.

    All in one transaction: a streamed listing that breaks half-way (`records` raising) leaves
    nothing behind. The window is locked only once the listing has been read whole, so a long
    listing does not hold up whatever else locks it; a sweep of the same tool recorded in the
    meantime wins, and this one is rolled back."""
    swept = RestoreWindow.objects.get(pk=window.pk).applied.get("swept", {})
    if tool.name in swept:
        return swept[tool.name]
    with transaction.atomic():
        sweep = StatementImport.objects.create(
            tool=tool.name,
            filename=incidents.sweep_name(window, tool.name),
            sha256="",
            period_start=start,
            period_end=end,
            provisional=True,
            origin=Origin.SWEEP,
            imported_by=ACTOR,
            phase=Phase.DONE,
            finished_at=timezone.now(),
            orphans_checked=True,
        )
        count, digest = _store_lines(sweep, records)
        window = RestoreWindow.objects.select_for_update().get(pk=window.pk)
        swept = window.applied.setdefault("swept", {})
        if tool.name in swept:
            transaction.set_rollback(True)
            return swept[tool.name]
        orphans = StatementLine.objects.filter(statement=sweep, effect__isnull=True).count()
        raised = _raise_incidents(window, tool, sweep)
        counts = {"records": count, "matched": count - orphans, "incidents": raised}
        if orphans > raised:
            counts["raised by another tool's sweep"] = orphans - raised
        sweep.sha256, sweep.lines = digest, count
        sweep.lines_matched, sweep.orphans = counts["matched"], raised
        sweep.save(update_fields=["sha256", "lines", "lines_matched", "orphans"])
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


def unswept(window: RestoreWindow) -> list[str]:
    """Tools due a sweep that have none yet (all of them until the sweep has looked)."""
    if "sweeps_due" not in window.applied:
        return ["(the sweep has not run yet)"]
    swept = window.applied.get("swept", {})
    return [tool for tool in window.applied["sweeps_due"] if tool not in swept]
