"""Archiving months of events (`manage.py archive --before YYYY-MM`, ADR 0016).

For each month before the one named, oldest first, while it still has a partition:

1. **Refusals**, each with a sentence saying why: a month still inside the retention period
   (it ended less than the longest retention ago: LEDGER_RETENTION or a tool's own, or one of
   its effects was resolved within it), a month holding events of effects that are not yet
   terminal, a month with unsealed events, and an export directory that holds something
   already.
2. **Export** into `<directory>/<YYYY-MM>/`: `events.csv` and `events.jsonl` (every event
   with its seal: seq, prev_hash, hash, in seal order) and `manifest.json` (the counts, the
   seq range, the cut and the chain head, the SHA-256 of both files).
3. **Verification of the export** against the chain: the JSON Lines file is read back, each
   event's link is recomputed from what the file holds and compared with the seal in the
   database, its data with its digest (unless redacted), and the CSV's digest and row count
   are checked. A mismatch refuses the month: nothing is dropped.
4. **The cut** at a sealed seq boundary: sealing follows commit order, not the calendar, so
   the month's last events may be sealed after the next month's first. `cut_seq` is the last
   seal such that every seal up to it is of an archived event; the month's seals past it are
   listed (`beyond_cut`). The checkpoint (`ArchivedMonth`) records both with the hash at the
   cut, and `verifyledger` starts there (`ledger.audit.seal.checkpoint`).
5. **Drop**: in one transaction under a 1 s lock_timeout (retried) and the sealer's lock, the
   checkpoint is written, the partition detached and dropped.

Constant memory: rows stream from server-side cursors and files are read line by line.
Seals are kept (their table is append-only); only the events go.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from ledger import jsonenc
from ledger.audit import partitions, seal
from ledger.models import EventKind, EventSeal, Tool
from ledger.models.audit import ArchivedMonth
from ledger.models.states import TERMINAL, sql_list
from ledger.policy import digests

log = logging.getLogger("ledger.archive")

CHUNK = 5000
COLUMNS = (
    "seq",
    "prev_hash",
    "hash",
    "id",
    "effect_id",
    "kind",
    "actor",
    "from_status",
    "to_status",
    "reason",
    "digest",
    "created_at",
    "data",
)
_SEALS = EventSeal._meta.db_table
_SEALER_LOCK = 0x7365616C  # ledger.audit.seal's


class Refused(Exception):
    """A month that cannot be archived, and why (one sentence)."""


@dataclass
class Archived:
    month: str
    events: int
    cut_seq: int
    beyond_cut: int
    location: Path
    digests: dict[str, str] = field(default_factory=dict)


def longest_retention() -> timedelta:
    longest = Tool.objects.aggregate(longest=Max("retention"))["longest"]
    return max(timedelta(seconds=settings.LEDGER_RETENTION), longest or timedelta(0))


def _check(part: partitions.Partition) -> None:
    """Refuse a month that is not ready to go, saying why."""
    earlier = ArchivedMonth.objects.filter(month=part.start).first()
    if earlier:
        raise Refused(
            f"{part.month} was archived already ({earlier.archived_at:%Y-%m-%d}), yet its "
            f"partition {part.name} is back with events in it: move them out by hand first."
        )
    retention = longest_retention()
    now = timezone.now()
    ended = datetime(part.end.year, part.end.month, 1, tzinfo=UTC)
    if ended > now - retention:
        raise Refused(
            f"{part.month} is still inside the retention period: it ended {ended:%Y-%m-%d}, "
            f"and events are kept for {retention.days} days after (the longest retention)."
        )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FILTER (WHERE f.status NOT IN ({sql_list(TERMINAL)})), "
            f"min(f.id::text) FILTER (WHERE f.status NOT IN ({sql_list(TERMINAL)})), "
            "count(*) FILTER (WHERE f.resolved_at > now() - %s) "
            f"FROM (SELECT DISTINCT effect_id FROM {part.name}) e "
            "JOIN ledger_effect f ON f.id = e.effect_id",
            [retention],
        )
        open_, example, recent = cursor.fetchone()
        if open_:
            raise Refused(
                f"{part.month} holds events of {open_} effects that are not yet terminal "
                f"(for one, {example}): archive it once they are settled."
            )
        if recent:
            raise Refused(
                f"{part.month} is still inside the retention period: {recent} of its effects "
                f"were resolved less than {retention.days} days ago."
            )
        cursor.execute(
            f"SELECT count(*) FROM {part.name} e "
            f"WHERE NOT EXISTS (SELECT 1 FROM {_SEALS} s WHERE s.event_id = e.id)"
        )
        unsealed = cursor.fetchone()[0]
    if unsealed:
        raise Refused(
            f"{part.month} is not sealed: {unsealed} of its events have no seal yet "
            "(the sealer runs every minute; `manage.py verifyledger --seal` seals them now)."
        )


def _rows(part: partitions.Partition) -> Iterator[tuple]:
    """The month's events with their seals, in seal order, from a server-side cursor."""
    with transaction.atomic():
        cursor = connection.chunked_cursor()
        try:
            cursor.execute(
                "SELECT s.seq, s.prev_hash, s.hash, e.id, e.effect_id, e.kind, e.actor, "
                "e.from_status, e.to_status, e.reason, e.digest, e.created_at, e.data::text "
                f"FROM {part.name} e JOIN {_SEALS} s ON s.event_id = e.id ORDER BY s.seq"
            )
            while rows := cursor.fetchmany(CHUNK):
                yield from rows
        finally:
            cursor.close()


def _jsonl(row: tuple) -> str:
    """One JSON line: the data as PostgreSQL wrote it, the rest as JSON strings/numbers."""
    values = dict(zip(COLUMNS[:-1], row[:-1], strict=True))
    values["effect_id"] = str(values["effect_id"])
    values["created_at"] = seal._instant(values["created_at"])
    return json.dumps(values)[:-1] + ', "data": ' + row[-1] + "}\n"


class _Digesting:
    """A text file that keeps the SHA-256 of what was written."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("w", encoding="utf-8", newline="")
        self.sha = hashlib.sha256()

    def write(self, text: str) -> int:
        self.sha.update(text.encode())
        return self.file.write(text)

    def close(self) -> str:
        self.file.close()
        return self.sha.hexdigest()


def export(part: partitions.Partition, directory: Path) -> tuple[int, dict[str, str]]:
    """Write the month's CSV and JSON Lines; the number of events and the files' digests."""
    as_csv = _Digesting(directory / "events.csv")
    as_jsonl = _Digesting(directory / "events.jsonl")
    writer = csv.writer(as_csv)
    writer.writerow(COLUMNS)
    count = 0
    for row in _rows(part):
        count += 1
        writer.writerow([*row[:11], seal._instant(row[11]), row[12]])
        as_jsonl.write(_jsonl(row))
    return count, {"events.csv": as_csv.close(), "events.jsonl": as_jsonl.close()}


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as data:
        while block := data.read(1 << 20):
            sha.update(block)
    return sha.hexdigest()


def _seals(part: partitions.Partition) -> Iterator[tuple[int, str]]:
    with transaction.atomic():
        cursor = connection.chunked_cursor()
        try:
            cursor.execute(
                f"SELECT s.seq, s.hash FROM {part.name} e JOIN {_SEALS} s "
                "ON s.event_id = e.id ORDER BY s.seq"
            )
            while rows := cursor.fetchmany(CHUNK):
                yield from rows
        finally:
            cursor.close()


def _link_holds(record: dict[str, Any]) -> bool:
    event = [record[c] for c in COLUMNS[3:12]]
    return seal.link_hash(record["prev_hash"], seal.content_of(event)) == record["hash"]


def _data_holds(record: dict[str, Any]) -> bool:
    redacted = record["data"] == {"redacted": True}
    if redacted and record["kind"] != EventKind.RETENTION_PURGE.value:
        return True
    return digests.content_digest(record["data"]) == record["digest"]


def verify_export(part: partitions.Partition, directory: Path, files: dict[str, str]) -> int:
    """Check the files against the chain (see the module's docstring); the events checked.
    Raises Refused at the first thing that does not hold."""
    for name, expected in files.items():
        if _file_digest(directory / name) != expected:
            raise Refused(f"The export of {part.month} changed on disk ({name}): nothing dropped.")
    checked = 0
    with (directory / "events.jsonl").open(encoding="utf-8") as lines:
        sealed = _seals(part)
        for number, line in enumerate(lines, start=1):
            record = jsonenc.loads(line)
            seq, hash_ = next(sealed, (None, None))
            if (record["seq"], record["hash"]) != (seq, hash_) or not _link_holds(record):
                raise Refused(
                    f"The export of {part.month} does not match the chain at line {number} "
                    f"(seal {record['seq']}): nothing dropped."
                )
            if not _data_holds(record):
                raise Refused(
                    f"The export of {part.month} holds data that does not match its digest at "
                    f"line {number}: nothing dropped."
                )
            checked += 1
        if next(sealed, None) is not None:
            raise Refused(f"The export of {part.month} is missing events: nothing dropped.")
    with (directory / "events.csv").open(encoding="utf-8", newline="") as table:
        rows = sum(1 for _ in csv.reader(table)) - 1
    if rows != checked:
        raise Refused(f"The CSV export of {part.month} has {rows} events, not {checked}.")
    return checked


def cut(part: partitions.Partition) -> tuple[int, str, list[int], tuple]:
    """The sealed boundary after this month: (cut_seq, its hash, the month's seals past it,
    (first_seq, last_seq, first_event_id, last_event_id))."""
    start = seal.checkpoint()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT min(s.seq), max(s.seq), min(e.id), max(e.id) FROM {part.name} e "
            f"JOIN {_SEALS} s ON s.event_id = e.id"
        )
        bounds = cursor.fetchone()
        last = bounds[1] if bounds[1] is not None else start.seq
        # The first seal past the previous cut that is of an event still held elsewhere.
        cursor.execute(
            f"SELECT min(s.seq) FROM {_SEALS} s WHERE s.seq > %s AND s.seq <= %s "
            "AND NOT EXISTS (SELECT 1 FROM unnest(%s::bigint[], %s::bigint[]) AS r(lo, hi) "
            "WHERE s.seq BETWEEN r.lo AND r.hi) AND NOT EXISTS "
            f"(SELECT 1 FROM {part.name} e WHERE e.id = s.event_id)",
            [start.seq, last, [r[0] for r in start.beyond], [r[1] for r in start.beyond]],
        )
        other = cursor.fetchone()[0]
        cut_seq = last if other is None else other - 1
        # As ranges [first, last] of consecutive seqs: a handful where commits straddle the
        # month's end, one long run where a month was sealed after later ones (a backfill).
        cursor.execute(
            f"SELECT min(seq), max(seq) FROM (SELECT s.seq, s.seq - row_number() OVER "
            f"(ORDER BY s.seq) AS run FROM {part.name} e JOIN {_SEALS} s "
            "ON s.event_id = e.id WHERE s.seq > %s) AS past GROUP BY run ORDER BY 1",
            [cut_seq],
        )
        beyond = [[first, last] for first, last in cursor.fetchall()]
        cursor.execute(f"SELECT hash FROM {_SEALS} WHERE seq = %s", [cut_seq])
        found = cursor.fetchone()
    cut_hash = found[0] if found else start.hash
    return cut_seq, cut_hash, beyond, bounds


def _drop(part: partitions.Partition, checkpoint: ArchivedMonth) -> None:
    def work(cursor) -> None:
        # The sealer is not writing while the month goes (it waits for this transaction).
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_SEALER_LOCK])
        checkpoint.save()
        # Not DETACH ... CONCURRENTLY: PostgreSQL refuses it on a table with a DEFAULT partition,
        # and it cannot share a transaction with the checkpoint. The plain DETACH takes ACCESS
        # EXCLUSIVE on the events table for a moment, under lock_timeout, retried (`retrying`).
        cursor.execute(f"ALTER TABLE {partitions.EVENTS} DETACH PARTITION {part.name}")
        cursor.execute(f"DROP TABLE {part.name}")

    partitions.retrying(work)


def _prepare(directory: Path, month: str) -> Path:
    target = directory / month
    if target.exists() and any(target.iterdir()):
        raise Refused(
            f"{target} holds an export already: move it away, or archive into another directory."
        )
    target.mkdir(parents=True, exist_ok=True)
    return target


def archive_month(part: partitions.Partition, directory: Path, *, by: str) -> Archived:
    """Check, export, verify, cut and drop one month (see the module's docstring)."""
    _check(part)
    target = _prepare(directory, part.month)
    events, files = export(part, target)
    cut_seq, cut_hash, beyond, (first_seq, last_seq, first_id, last_id) = cut(part)
    manifest = {
        "month": part.month,
        "partition": part.name,
        "events": events,
        "first_seq": first_seq,
        "last_seq": last_seq,
        "first_event_id": first_id,
        "last_event_id": last_id,
        "cut": {"seq": cut_seq, "hash": cut_hash, "beyond": beyond},
        "chain_head": _head(),
        "digests": files,
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    verify_export(part, target, files)
    checkpoint = ArchivedMonth(
        month=part.start,
        partition=part.name,
        events=events,
        first_event_id=first_id,
        last_event_id=last_id,
        first_seq=first_seq,
        last_seq=last_seq,
        cut_seq=cut_seq,
        cut_hash=cut_hash,
        beyond_cut=beyond,
        location=str(target),
        digests={**files, "manifest.json": _file_digest(target / "manifest.json")},
        archived_by=by,
    )
    _drop(part, checkpoint)
    log.info("archived %s: %d events, cut at seal %d", part.month, events, cut_seq)
    past = sum(last - first + 1 for first, last in beyond)
    return Archived(part.month, events, cut_seq, past, target, files)


def _head() -> dict[str, Any]:
    head = seal.chain_head()
    return {"seq": head.seq, "hash": head.hash, "event_id": head.event_id}


def due(before: date) -> list[partitions.Partition]:
    """The partitions of the months before `before`, oldest first."""
    return [p for p in partitions.partitions() if p.end <= before]


def archive_before(before: date, directory: Path, *, by: str) -> list[Archived]:
    """Archive every month before `before`, oldest first, stopping at the first refusal
    (months are archived in order, so that each cut follows the one before)."""
    months = due(before)
    if not months:
        raise Refused(f"No month before {before:%Y-%m} is left to archive.")
    return [archive_month(part, directory, by=by) for part in months]
