"""Provider statements: the provider's own record of what it did, imported and used to settle
effects, without ever turning a wrong "absent" into a second charge.

The API (the command `importstatement`, the operators' upload form and the daily
`fetch_statement` schedule all call it):

- `import_statement(tool, source, *, filename, period_start, period_end, provisional, by,
  origin) -> StatementImport`: parse and stage the file all-or-nothing (`StatementError`
  with the line and column otherwise; nothing is stored), then apply it in batches, each
  committed on its own. `source` is bytes, a binary stream or a path; `filename`'s extension
  says CSV or JSON Lines. `by` is who ("shell:alice", "operator:bob", "system:statements"),
  `origin` how ("command", "upload", "fetch"). Imports of one tool run one at a time: one
  that finds another of its tool unfinished finishes that one first, then stages its own
  (`stage`); an import that cannot be finished (its batch raises) is logged and left to
  `resume`.
- `resume(import_id) -> StatementImport`: apply what is left of an import a crash or an
  error interrupted; the row's `phase` and `cursor` say where it stopped.
- `already_imported(tool, period_start, period_end) -> bool`: is the period covered by final
  statements already.
- `incident_queue()`, `acknowledge_incident(incident_id, *, user, note)`: the orphans'
  incidents, and a person's acknowledge decision.

How lines are read: `parse`; staged, revised and matched by reference: `stage`; what the lines
mean for an effect: `verdicts`; applied: `apply`; proofs of absence: `absence`; orphans and
their incidents: `orphans`; lines held while their effect could not move, looked at again once
it can: `held`.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO

from django.db import connection

from ledger.models import StatementImport
from ledger.models.statements import Origin, Phase
from ledger.statements import stage as staging
from ledger.statements.absence import absence_phase
from ledger.statements.apply import lines_phase, removals_phase, step
from ledger.statements.orphans import (
    AlreadyAcknowledged,
    acknowledge_incident,
    incident_queue,
    orphans_phase,
)
from ledger.statements.parse import StatementError

__all__ = [
    "AlreadyAcknowledged",
    "StatementError",
    "acknowledge_incident",
    "already_imported",
    "import_statement",
    "incident_queue",
    "resume",
]

log = logging.getLogger(__name__)

# The phases in the order they run (`ledger.statements.apply.step`).
PHASES = {
    Phase.LINES: lines_phase,
    Phase.REMOVALS: removals_phase,
    Phase.ABSENCE: absence_phase,
    Phase.ORPHANS: orphans_phase,
}


def import_statement(
    tool: str,
    source: IO[bytes] | Path | bytes,
    *,
    filename: str,
    period_start: datetime,
    period_end: datetime,
    provisional: bool,
    by: str,
    origin: str,
) -> StatementImport:
    if origin not in Origin.values:
        raise StatementError(f"origin must be one of {Origin.values}, not {origin!r}.")
    found = staging.check_request(tool, filename, period_start, period_end)
    passing: frozenset[int] = frozenset()
    while True:
        try:
            with _opened(source) as stream:
                made = staging.stage(
                    found,
                    stream,
                    filename=filename,
                    period_start=period_start,
                    period_end=period_end,
                    provisional=provisional,
                    by=by,
                    origin=origin,
                    passing=passing,
                )
        except staging.Behind as behind:
            if not _finish_first(behind.import_id):
                passing |= {behind.import_id}
            continue
        return resume(made.pk)


def _finish_first(import_id: int) -> bool:
    """Finish an unfinished import of the tool before staging another (beside the process
    applying it, if one still is: they take its batches in turn). False when it cannot be
    finished: it is logged and left to `resume`."""
    try:
        resume(import_id)
    except Exception:
        log.exception("statement import %s could not be finished; the next goes on", import_id)
        return False
    return True


@contextmanager
def _opened(source: IO[bytes] | Path | bytes) -> Iterator[IO[bytes]]:
    if isinstance(source, bytes):
        yield io.BytesIO(source)
    elif isinstance(source, Path):
        with source.open("rb") as stream:
            yield stream
    else:
        yield source


def resume(import_id: int) -> StatementImport:
    """Apply the rest of an import, batch by batch; the finished row."""
    if not StatementImport.objects.filter(pk=import_id).exists():
        raise StatementError(f"No statement import has id {import_id}.")
    while step(import_id, PHASES):
        pass
    return StatementImport.objects.get(pk=import_id)


def already_imported(tool: str, period_start: datetime, period_end: datetime) -> bool:
    """Do the tool's final statements cover [period_start, period_end) already?"""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(range_agg(tstzrange(period_start, period_end, '[)')) "
            "@> tstzrange(%s, %s, '[)'), false) "
            f"FROM {StatementImport._meta.db_table} WHERE tool = %s AND NOT provisional",
            [period_start, period_end, tool],
        )
        return cursor.fetchone()[0]
