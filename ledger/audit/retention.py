"""Retention: thirty days after an effect is resolved, its payloads are gone.

An hourly schedule (`reconcilers.schedules`) redacts the payloads of terminal effects that
were resolved longer ago than their tool's `retention` (LEDGER_RETENTION, 30 days, for a tool
that declares none or was never declared):

| what | becomes |
| --- | --- |
| the effect's request and provenance | {"redacted": true} |
| its response and error, where there is one | {"redacted": true} |
| its target | "redacted" |
| its events' data: outcomes, lookup answers, statement lines, decisions | {"redacted": true} |

What stays: status and every other column of the effect and its events, among them
`request_hash` and each event's digest (so the seals and `manage.py verifyledger` still
hold: the verifier reports such events as redacted, not as altered), and the normalized
`amount_minor`, `currency` and `provider_ref`, so that a statement that arrives later still
matches. The status does not change: only `ledger.effects.transitions` writes it.

Age counts from `resolved_at`: the moment the effect last entered a terminal status (a
confirmed effect that is later compensated starts counting again at its compensation), by
the database clock. Not from `created_at`: an effect that took a week to settle keeps its
evidence for as long as one that settled at once. An effect without `resolved_at` is kept.

Kept whatever its age: an effect with an open review item (a person is still looking at
exactly this evidence), with a legal hold (set by an admin), or still waiting for its tail
check (`reconcilers.tailcheck` looks the request up once more). Once the item is resolved,
the hold cleared or the check done, the next run redacts it.

How: one scan finds the effects due, then batches of at most `BATCH` effects, each one
transaction of four set-based statements: lock the batch's effects (SKIP LOCKED: an effect an
agent or operator is writing is left for the next run), redact their columns where they are
still due (re-checked under the lock, so a review item or hold that arrived meanwhile is
honoured), append one `retention_purge` event per effect, then redact their earlier events'
data. The events' append-only trigger permits that one change, and only after such an event
(migration 0020). Running it again finds nothing: an effect whose target is redacted is done
(so an effect whose target was the word "redacted" to begin with is never redacted). The scan
reads `effect_retention_idx`, terminal effects not yet redacted by `resolved_at`, so an hourly
run costs what is due, not the whole table.

Not covered: an event appended to an effect after its purge (a statement line that arrives
later) keeps its data.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from ledger import jsonenc
from ledger.models import Effect, EffectEvent, EventKind, ReviewItem, Tool
from ledger.models.states import TERMINAL, sql_list
from ledger.rules.events import EVENT_COLUMNS, event_values

# Pinned: log pipelines filter on the name this module had before the ledger's subpackages.
log = logging.getLogger("ledger.retention")

# Effects per transaction: their rows stay locked until it commits, and agents write these
# tables all the time.
BATCH = 1000
# Effects taken per scheduled run: at most this many batches, and no batch is started once
# the run has taken `TIME_BUDGET` seconds, so that a run ends well inside django-q2's task
# timeout (60 s; a batch of effects with a few events each takes about a second, most of it
# the event trigger's checks). What is left is done by the next run.
MAX_BATCHES = 40
TIME_BUDGET = 30.0
ACTOR = "system:retention"
REDACTED = {"redacted": True}
REDACTED_TARGET = "redacted"
# What a purge redacts, as its event records it.
FIELDS = ("request", "response", "error", "target", "provenance", "event data")

_EFFECTS = Effect._meta.db_table
_EVENTS = EffectEvent._meta.db_table
_MARKER = jsonenc.dumps(REDACTED)

# An effect whose payloads are due to go, over `e`. The status and target conditions are
# written as `effect_retention_idx`'s, so that the scan can read that index.
_DUE = f"""
    e.status IN ({sql_list(TERMINAL)})
    AND e.resolved_at < now() - {{retention}}
    AND NOT e.legal_hold
    AND e.tail_check_at IS NULL
    AND e.target <> '{REDACTED_TARGET}'
    AND NOT EXISTS (SELECT 1 FROM {ReviewItem._meta.db_table} r
                     WHERE r.effect_id = e.id AND r.resolved_at IS NULL)
"""
_RETENTION = (
    f"COALESCE((SELECT t.retention FROM {Tool._meta.db_table} t WHERE t.name = e.tool), "
    "make_interval(secs => %(default)s))"
)
DUE = _DUE.format(retention=_RETENTION)


def _params(**more: Any) -> dict[str, Any]:
    return {
        "target": REDACTED_TARGET,
        "marker": _MARKER,
        "default": settings.LEDGER_RETENTION,
        **more,
    }


def _duration(seconds: int) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} seconds"


def due(limit: int) -> list[str]:
    """Ids of effects whose payloads are due to go, the longest resolved first."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id FROM {_EFFECTS} e WHERE {DUE} ORDER BY e.resolved_at, e.id "
            f"LIMIT %(limit)s",
            _params(limit=limit),
        )
        return [str(row[0]) for row in cursor.fetchall()]


def redact_batch(effect_ids: list[str]) -> tuple[int, int]:
    """Redact these effects where they are still due, in one transaction: (effects, events)
    redacted."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Locked first, in a statement of their own: the UPDATE below then re-checks the
        # review items and holds with a snapshot taken after the locks, and a review item
        # opened from now on (its foreign key check) waits for this transaction.
        cursor.execute(
            f"SELECT id FROM {_EFFECTS} WHERE id = ANY(%s::uuid[]) FOR UPDATE SKIP LOCKED",
            [effect_ids],
        )
        locked = [str(row[0]) for row in cursor.fetchall()]
        if not locked:
            return 0, 0
        cursor.execute(
            f"UPDATE {_EFFECTS} e SET request = %(marker)s::jsonb, "
            "response = CASE WHEN e.response IS NULL THEN NULL ELSE %(marker)s::jsonb END, "
            "error = CASE WHEN e.error IS NULL THEN NULL ELSE %(marker)s::jsonb END, "
            "target = %(target)s, provenance = %(marker)s::jsonb, updated_at = now() "
            f"WHERE e.id = ANY(%(ids)s::uuid[]) AND {DUE} "
            f"RETURNING e.id, e.status, extract(epoch FROM {_RETENTION})::bigint",
            _params(ids=locked),
        )
        redacted = cursor.fetchall()
        if not redacted:
            return 0, 0
        events = _purge_events(redacted)
        # First the purge events: the trigger lets an event's data go only after one.
        cursor.execute(
            f"INSERT INTO {_EVENTS} (effect_id, {EVENT_COLUMNS}, created_at) "
            f"SELECT *, now() FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], "
            f"%s::text[], %s::text[], %s::jsonb[], %s::text[])",
            [list(column) for column in zip(*events, strict=True)],
        )
        # Every event of these effects is older than its purge event: the effects are locked,
        # so no event can be appended to them until this commits. Empty data has nothing to
        # redact.
        cursor.execute(
            f"UPDATE {_EVENTS} SET data = %(marker)s::jsonb "
            f"WHERE effect_id = ANY(%(ids)s::uuid[]) AND kind <> %(purge)s "
            f"AND data <> '{{}}'::jsonb AND data <> %(marker)s::jsonb",
            {
                "marker": _MARKER,
                "ids": [row[0] for row in events],
                "purge": EventKind.RETENTION_PURGE.value,
            },
        )
        return len(redacted), cursor.rowcount


def _purge_events(redacted: list[tuple[Any, str, int]]) -> list[list[Any]]:
    """One `retention_purge` event per redacted effect: (effect id, *event columns)."""
    return [
        [
            str(effect_id),
            *event_values(
                kind=EventKind.RETENTION_PURGE,
                actor=ACTOR,
                from_status=status,
                to_status=status,
                reason=f"Payloads redacted: resolved more than {_duration(seconds)} ago.",
                data={"fields": list(FIELDS), "retention_seconds": seconds},
            ),
        ]
        for effect_id, status, seconds in redacted
    ]


def redact_expired(
    *, batch: int = BATCH, max_batches: int = MAX_BATCHES, budget: float = TIME_BUDGET
) -> dict[str, int]:
    """The scheduled run: redact the effects due, `batch` per transaction, at most
    `max_batches` batches and no new batch after `budget` seconds. `skipped`: effects found
    due but left for the next run (locked by someone, changed meanwhile, or out of time)."""
    effects = events = 0
    ids = due(batch * max_batches)
    # A duration on this process's clock, not a deadline in the ledger: the app clock will do.
    stop = time.monotonic() + budget
    for start in range(0, len(ids), batch):
        if time.monotonic() > stop:
            break
        done, events_done = redact_batch(ids[start : start + batch])
        effects += done
        events += events_done
    result = {"effects": effects, "events": events, "skipped": len(ids) - effects}
    if ids:
        log.info("retention: %s", result)
    return result
