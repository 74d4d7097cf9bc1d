"""The tamper-evident chain over the event log.

A background sealer appends one `EventSeal` per committed event, in order: each hash is the
SHA-256 of the previous hash and the event's canonical content. The content carries the
payload's digest rather than the payload, so a later redaction of `data` leaves the chain
whole. The verifier recomputes the chain from the rows as they are now and names the first
link that no longer holds; exported heads let a rewrite of the whole chain be noticed from
outside the database. An event whose data retention replaced with {"redacted": true}
(`ledger.audit.retention`) no longer matches its digest: it is counted as redacted, not as altered,
on the condition under which the events' trigger permits that change (a `retention_purge`
event of the same effect appended after it).

Archived months (`ledger.audit.archive`) leave a checkpoint: the verifier starts at the latest
one (the seal at the cut must still hold its hash) and accepts a missing event only where a
checkpoint lists its seal. After a restore, heads exported from the branch it left behind
(past a restore window's `fork_seq`, exported before the window started) are counted apart,
not checked; every other head is.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger import jsonenc
from ledger.models import EffectEvent, EventKind, EventSeal, RestoreWindow
from ledger.models.audit import ArchivedMonth
from ledger.policy import digests

# Pinned: log pipelines filter on the name this module had before the ledger's subpackages.
log = logging.getLogger("ledger.seal")

GENESIS = "0" * 64
# Events sealed per transaction; `seal_all` runs batches until the backlog is gone.
BATCH = 1000
# Bounds one scheduled run (50,000 events) well inside django-q2's task timeout; what is left
# is picked up a minute later.
MAX_BATCHES = 50
# Rows the verifier pulls from its server-side cursor per round trip.
VERIFY_CHUNK = 2000
# Whether an event's data is retention's marker, put there after a purge of its effect: the
# condition of the events' append-only trigger (EffectEvent.Meta.triggers), over `e`. The
# purge is looked up (event_timeline_idx) only for events that hold the marker.
_REDACTED_SQL = (
    "(e.data = jsonb_build_object('redacted', true) "
    f"AND e.kind <> '{EventKind.RETENTION_PURGE.value}' "
    f"AND EXISTS (SELECT 1 FROM {EffectEvent._meta.db_table} p "
    "WHERE p.effect_id = e.effect_id "
    f"AND p.kind = '{EventKind.RETENTION_PURGE.value}' AND p.id > e.id))"
)
# pg_try_advisory_xact_lock key held by the one sealer at work ("seal" in ASCII).
_SEALER_LOCK = 0x7365616C

_EVENTS = EffectEvent._meta.db_table
_SEALS = EventSeal._meta.db_table
# The columns a seal covers, in the order `content` takes them.
_SEALED_COLUMNS = (
    "e.id, e.effect_id, e.kind, e.actor, e.from_status, e.to_status, e.reason, e.digest, "
    "e.created_at"
)


def _instant(value: datetime) -> str:
    """Exact to the microsecond, always UTC: the text PostgreSQL's timestamptz round-trips."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def content(row: Sequence[Any]) -> str:
    """Canonical JSON of what a seal covers, from a row of `_SEALED_COLUMNS`."""
    return content_of([*row[:8], _instant(row[8])])


def content_of(values: Sequence[Any]) -> str:
    """`content` from the same values with `created_at` already as its text (`_instant`): an
    exported event (`ledger.audit.archive`) is checked this way."""
    event_id, effect_id, kind, actor, from_status, to_status, reason, digest, created_at = values
    return jsonenc.dumps(
        {
            "id": event_id,
            "effect_id": str(effect_id),
            "kind": kind,
            "actor": actor,
            "from_status": from_status,
            "to_status": to_status,
            "reason": reason,
            "digest": digest,
            "created_at": created_at,
        },
        canonical=True,
    )


def link_hash(prev_hash: str, event_content: str) -> str:
    # prev_hash is always 64 hex characters, so plain concatenation is unambiguous.
    return hashlib.sha256(f"{prev_hash}{event_content}".encode()).hexdigest()


def _grace() -> int:
    return settings.LEDGER_SEAL_GRACE


def seal_pending(limit: int = BATCH, *, grace: int | None = None) -> int:
    """Seal up to `limit` committed, unsealed events in id order; the number sealed, 0 also
    when another sealer is at work."""
    grace = _grace() if grace is None else grace
    with transaction.atomic(), connection.cursor() as cursor:
        # One sealer at a time, or two would both extend the same head. Agents never take this
        # lock, so their inserts are never held up by it (the seal table's primary key on seq
        # would refuse a fork anyway).
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_SEALER_LOCK])
        if not cursor.fetchone()[0]:
            return 0
        cursor.execute(
            f"SELECT seq, hash, event_id, sealed_at FROM {_SEALS} ORDER BY seq DESC LIMIT 1"
        )
        seq, prev_hash, last_event, last_sealed = cursor.fetchone() or (0, GENESIS, 0, None)
        # Events commit out of id order, so the scan cannot start after the highest sealed id:
        # an event with a lower id may still be in flight. It starts at a floor below which
        # every unsealed event is a straggler, one whose transaction has been open for longer
        # than the grace (agents' transactions never are; the verifier reports any there is):
        # the lower of (a) the highest event id whose seal is at least a grace older than the
        # last seal and (b) the last sealed event. An unsealed event below (a) had its id, but
        # was not yet visible, when that seal was written (runs take the lowest ids first);
        # below (b) it was not visible to the last run either, a grace later. Measuring from
        # the last seal rather than from now() keeps a sealer that was stopped for a while from
        # jumping past events that committed while it was away.
        # Both probes use the seal table's unique event index: the floor walks it down from
        # the highest sealed event past about one grace of seals, and NOT EXISTS looks events
        # above the floor up in it (the floor is repeated inside so that a merge anti-join,
        # too, starts there), so a run reads about one grace of events, never the whole table.
        floor = 0
        if last_sealed is not None:
            cursor.execute(
                f"SELECT event_id FROM {_SEALS} "
                f"WHERE sealed_at < %s - make_interval(secs => %s) "
                f"ORDER BY event_id DESC LIMIT 1",
                [last_sealed, grace],
            )
            floor = min((cursor.fetchone() or (0,))[0], last_event)
        cursor.execute(
            f"SELECT {_SEALED_COLUMNS} FROM {_EVENTS} e "
            f"WHERE e.id > %s AND NOT EXISTS "
            f"(SELECT 1 FROM {_SEALS} s WHERE s.event_id = e.id AND s.event_id > %s) "
            f"ORDER BY e.id LIMIT %s",
            [floor, floor, limit],
        )
        rows = cursor.fetchall()
        if not rows:
            return 0
        _insert_links(cursor, rows, seq, prev_hash)
    return len(rows)


def _insert_links(cursor: Any, rows: list[tuple[Any, ...]], seq: int, prev_hash: str) -> None:
    """Write the links over `rows` after the head (seq, prev_hash). Seals name their event by
    a plain column (no foreign key: the events table is partitioned and archived months are
    dropped), so the insert itself checks that each event is there, at its id and created_at,
    and the batch is refused whole otherwise."""
    cursor.execute(
        f"INSERT INTO {_SEALS} (seq, event_id, prev_hash, hash, sealed_at) "
        f"SELECT seq, event_id, prev_hash, hash, now() "
        f"FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[], "
        f"%s::timestamptz[]) AS link(seq, event_id, prev_hash, hash, created_at) "
        f"WHERE EXISTS (SELECT 1 FROM {_EVENTS} e "
        f"WHERE e.id = link.event_id AND e.created_at = link.created_at)",
        [*_links(rows, seq, prev_hash), [row[-1] for row in rows]],
    )
    if cursor.rowcount != len(rows):
        raise RuntimeError(
            f"{len(rows) - cursor.rowcount} of {len(rows)} events to seal are gone: no seal written"
        )


def _links(rows: list[tuple[Any, ...]], seq: int, prev_hash: str) -> list[list[Any]]:
    """The chain's next links over `rows`, after the head (seq, prev_hash), as the INSERT's
    four arrays: seqs, event ids, previous hashes, hashes."""
    seqs, event_ids, prev_hashes, hashes = [], [], [], []
    for row in rows:
        seq += 1
        event_hash = link_hash(prev_hash, content(row))
        seqs.append(seq)
        event_ids.append(row[0])
        prev_hashes.append(prev_hash)
        hashes.append(event_hash)
        prev_hash = event_hash
    return [seqs, event_ids, prev_hashes, hashes]


def seal_all(*, limit: int = BATCH, max_batches: int = MAX_BATCHES) -> int:
    """The scheduled sealer: batches until nothing is pending, at most `max_batches`."""
    total = 0
    for _ in range(max_batches):
        sealed = seal_pending(limit)
        total += sealed
        if sealed < limit:
            break
    if total:
        log.info("sealed %d events", total)
    return total


@dataclass(frozen=True)
class Head:
    seq: int
    hash: str
    event_id: int | None
    sealed_at: datetime | None


def chain_head() -> Head:
    """The last seal, or the genesis head (seq 0) of an empty chain."""
    last = EventSeal.objects.order_by("-seq").values("seq", "hash", "event_id", "sealed_at")
    row = last.first()
    return Head(**row) if row else Head(0, GENESIS, None, None)


def head_file() -> Path:
    return Path(settings.LEDGER_CHAIN_HEAD_FILE)


def export_head() -> dict[str, Any]:
    """Append the chain head to the head file (one JSON line) and log it: a copy outside the
    database that a rewrite of the whole chain cannot reach."""
    head = chain_head()
    line = {
        "seq": head.seq,
        "hash": head.hash,
        "event_id": head.event_id,
        "sealed_at": _instant(head.sealed_at) if head.sealed_at else None,
        "exported_at": _instant(timezone.now()),
    }
    path = head_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")
    log.info("chain head: %s", json.dumps(line, sort_keys=True))
    return line


def load_heads(path: Path) -> list[dict[str, Any]]:
    """Every head exported to `path`; a line that is not an exported head is an error, as a
    damaged head file is itself a finding."""
    heads = []
    with path.open(encoding="utf-8") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                head = json.loads(text)
                seq, hash_ = int(head["seq"]), str(head["hash"])
            except (ValueError, TypeError, KeyError):
                raise ValueError(f"{path}:{number} is not an exported chain head") from None
            heads.append({**head, "seq": seq, "hash": hash_})
    return heads


def last_export() -> dict[str, Any] | None:
    """The most recent line of the head file, or None when nothing was exported yet."""
    try:
        with head_file().open("rb") as heads:
            # The file grows by one short line per export: its tail holds the last one.
            heads.seek(0, 2)
            heads.seek(max(0, heads.tell() - 4096))
            tail = heads.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for text in reversed(tail):
        if text.strip():
            try:
                return json.loads(text)
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class Break:
    """The first link that no longer holds."""

    seq: int
    event_id: int | None
    problem: str
    detail: str

    @property
    def where(self) -> str:
        return f"seal {self.seq}" + (f" (event {self.event_id})" if self.event_id else "")


@dataclass(frozen=True)
class Verdict:
    head: Head
    # Seals read; equals head.seq when no seal is missing.
    count: int
    broken: Break | None
    # Links that failed, the first one included.
    problems: int
    heads_checked: int
    unsealed_late: int
    oldest_unsealed_id: int | None
    grace: int
    # Sealed events whose data retention redacted (their digest kept): not a break.
    redacted: int = 0
    # Where the walk started: the latest archive cut (`ArchivedMonth`), 0 for the genesis.
    start: int = 0
    # Seals past the cut whose events an archive took, as its checkpoint lists them.
    archived: int = 0
    # Exported heads at or below the cut (their events are archived): not checked again.
    heads_before_start: int = 0
    # Exported heads of a branch a restore left behind (past a window's fork_seq, exported
    # before it started): expected to be missing or different, so counted apart.
    lost_branch_heads: int = 0

    @property
    def intact(self) -> bool:
        return self.broken is None


@dataclass(frozen=True)
class Checkpoint:
    """Where verification starts: seal `seq` with its `hash`, and the ranges of seals past it
    whose events an archive took (`beyond`, sorted [first, last] pairs)."""

    seq: int
    hash: str
    beyond: tuple[tuple[int, int], ...] = ()

    def archived(self, seq: int) -> bool:
        index = bisect.bisect_right(self.beyond, (seq, 2**63)) - 1
        return index >= 0 and self.beyond[index][0] <= seq <= self.beyond[index][1]


def checkpoint() -> Checkpoint:
    """The latest archive cut, the start of the oldest month still held; the genesis head
    when nothing was archived."""
    cuts = list(ArchivedMonth.objects.order_by("-cut_seq").values_list("cut_seq", "cut_hash"))
    if not cuts:
        return Checkpoint(0, GENESIS)
    seq, hash_ = cuts[0]
    beyond = []
    for listed in ArchivedMonth.objects.values_list("beyond_cut", flat=True):
        beyond += [(first, last) for first, last in listed if last > seq]
    return Checkpoint(seq, hash_, tuple(sorted(beyond)))


def _exported_at(head: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(head["exported_at"]))
    except (KeyError, ValueError):
        return None


def lost_branch(heads: Iterable[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """`heads` split into those to check and those of a lost branch: past the `fork_seq` of a
    restore window and exported before that window started. A head without an export time
    is checked."""
    windows = list(RestoreWindow.objects.values_list("fork_seq", "started_at"))
    kept, lost = [], []
    for head in heads:
        at = _exported_at(head)
        if at and any(head["seq"] > fork and at < started for fork, started in windows):
            lost.append(head)
        else:
            kept.append(head)
    return kept, lost


def verify(*, heads: Iterable[dict[str, Any]] = (), grace: int | None = None) -> Verdict:
    """Recompute the chain from the rows as they are now, in seq order and constant memory,
    from the latest archive checkpoint on (`checkpoint`).

    `heads` are previously exported heads (`load_heads`): the recomputed hash at each of
    their seqs must still be theirs, so a chain rewritten from scratch does not pass. Heads of
    a branch a restore left behind (`lost_branch`) are counted, not checked.
    """
    grace = _grace() if grace is None else grace
    start = checkpoint()
    kept, lost = lost_branch(heads)
    exported = sorted((h["seq"], h["hash"]) for h in kept if h["seq"] > start.seq)
    state = _Walk(exported, start)
    state.check_start([h for h in kept if 0 < h["seq"] <= start.seq])
    with transaction.atomic():
        # A server-side cursor, inside a transaction so that it streams rather than being
        # materialised for WITH HOLD.
        cursor = connection.chunked_cursor()
        try:
            cursor.execute(
                f"SELECT s.seq, s.event_id, s.prev_hash, s.hash, s.sealed_at, "
                f"e.id IS NOT NULL, e.data::text, coalesce({_REDACTED_SQL}, false), "
                f"{_SEALED_COLUMNS} "
                f"FROM {_SEALS} s LEFT JOIN {_EVENTS} e ON e.id = s.event_id "
                f"WHERE s.seq > %s ORDER BY s.seq",
                [start.seq],
            )
            while rows := cursor.fetchmany(VERIFY_CHUNK):
                for row in rows:
                    state.step(row)
        finally:
            cursor.close()
        state.finish()
        unsealed, oldest = _unsealed_late(grace)
    return Verdict(
        head=state.head,
        count=state.count,
        broken=state.broken,
        problems=state.problems,
        heads_checked=state.heads_checked,
        unsealed_late=unsealed,
        oldest_unsealed_id=oldest,
        grace=grace,
        redacted=state.redacted,
        start=start.seq,
        archived=state.archived,
        heads_before_start=state.heads_before_start,
        lost_branch_heads=len(lost),
    )


def _unsealed_late(grace: int) -> tuple[int, int | None]:
    with connection.cursor() as plain:
        # A full anti-join: the verifier reads everything anyway, and this is how a
        # straggler below the sealer's floor is found.
        plain.execute(
            f"SELECT count(*), min(e.id) FROM {_EVENTS} e "
            f"WHERE e.created_at < now() - make_interval(secs => %s) "
            f"AND NOT EXISTS (SELECT 1 FROM {_SEALS} s WHERE s.event_id = e.id)",
            [grace],
        )
        return plain.fetchone()


def verify_against_exports() -> Verdict:
    """`verify` against every head exported to the configured head file, if there is one."""
    path = head_file()
    return verify(heads=load_heads(path) if path.exists() else ())


class _Walk:
    """The verifier's running state: one seal at a time, nothing kept but the last link."""

    def __init__(self, exported: list[tuple[int, str]], start: Checkpoint) -> None:
        self.exported = exported
        self.next_export = 0
        self.start = start
        self.head = Head(start.seq, start.hash, None, None)
        self.archived = 0
        self.heads_before_start = 0
        self.count = 0
        self.broken: Break | None = None
        self.problems = 0
        self.heads_checked = 0
        self.redacted = 0

    def _fail(self, seq: int, event_id: int | None, problem: str, detail: str) -> None:
        self.problems += 1
        if self.broken is None:
            self.broken = Break(seq, event_id, problem, detail)

    def _exported_seals_missing_below(self, seq: int) -> None:
        while self.next_export < len(self.exported) and self.exported[self.next_export][0] < seq:
            missing, _ = self.exported[self.next_export]
            self.next_export += 1
            self.heads_checked += 1
            self._fail(
                missing, None, "exported head missing", f"seal {missing} was exported but is gone"
            )

    def check_start(self, before: list[dict[str, Any]]) -> None:
        """The cut still holds: its seal's hash is the checkpoint's, as is an exported head at
        the cut. Heads below it are counted (their events are archived)."""
        if self.start.seq == 0:
            return
        stored = EventSeal.objects.filter(seq=self.start.seq).values_list("hash", flat=True)
        if stored.first() != self.start.hash:
            self._fail(
                self.start.seq, None, "checkpoint mismatch", "the seal at the archive cut changed"
            )
        for head in before:
            self.heads_before_start += 1
            if head["seq"] == self.start.seq and head["hash"] != self.start.hash:
                self.heads_checked += 1
                self._fail(
                    head["seq"],
                    None,
                    "differs from exported head",
                    "the archive cut is not the head exported at that seq",
                )

    def step(self, row: Sequence[Any]) -> None:
        seq, event_id, prev_hash, stored_hash, sealed_at, exists, data, redacted = row[:8]
        event = row[8:]
        self._exported_seals_missing_below(seq)
        expected_seq = self.head.seq + 1
        if seq != expected_seq:
            self._fail(seq, event_id, "broken link", f"seals {expected_seq}–{seq - 1} are missing")
        elif prev_hash != self.head.hash:
            self._fail(seq, event_id, "broken link", "prev_hash is not the previous seal's hash")
        if not exists and self.start.archived(seq):
            # Archived with its month after the cut: the checkpoint lists it.
            self.archived += 1
            recomputed = stored_hash
        elif not exists:
            self._fail(seq, event_id, "sealed event missing", f"event {event_id} is gone")
            recomputed = None
        else:
            recomputed = link_hash(prev_hash, content(event))
            if recomputed != stored_hash:
                self._fail(seq, event_id, "hash mismatch", "the event or its seal was altered")
            if redacted:
                self.redacted += 1
            elif digests.content_digest(jsonenc.loads(data)) != event[7]:
                self._fail(seq, event_id, "payload digest mismatch", "the event's data was altered")
        if self.next_export < len(self.exported) and self.exported[self.next_export][0] == seq:
            _, exported_hash = self.exported[self.next_export]
            self.next_export += 1
            self.heads_checked += 1
            if recomputed != exported_hash:
                self._fail(
                    seq,
                    event_id,
                    "differs from exported head",
                    "the chain up to here was rewritten since this head was exported",
                )
        # Carry the stored hash on, so one altered event is reported once, not at every link
        # after it.
        self.head = Head(seq, stored_hash, event_id, sealed_at)
        self.count += 1

    def finish(self) -> None:
        self._exported_seals_missing_below(2**63 - 1)
