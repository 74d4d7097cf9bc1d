"""The alert outbox: what people must be told, stored first and sent later, at least once.

`notify(kind, key, payload)` is the way in for one alert (a halt, a limit breach); the review
sweep (`reviews.alerts.due.sweep`) inserts many in one statement. Both are `INSERT … ON CONFLICT
DO NOTHING` on (kind, key), so telling it twice about the same thing is a no-op. Call `notify`
inside the transaction that makes the thing true: the alert then commits with it, or not at all.

A sender takes due rows with `lease` (FOR UPDATE SKIP LOCKED, then leased for LEASE_SECONDS
with attempts + 1), sends them outside any transaction, and reports with `finish`, whose UPDATE
names the attempt it leased: a sender whose lease ran out and whose row was taken over cannot
overwrite the newer sender's result. A failure leaves the row unsent and not leasable before
its backoff has passed.

Due rows are taken in the order they became due (a retried row when its backoff ended), not by
age alone: a row that fails every time is tried once per backoff and never stands first in
line ahead of rows that were waiting before it came due again. A row whose stored payload
cannot be read is still leased (with `problem` saying why), so the sender records it as a
failed attempt instead of stopping on it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from ledger.jsonenc import ExactJSONDecoder, ExactJSONEncoder
from ledger.models import Alert, AlertKind
from ledger.rules.plaintext import one_line

_TABLE = Alert._meta.db_table
# Longer than a sender's whole run (reviews.alerts.sender.TIME_BUDGET plus one send's
# timeouts), so a live sender never loses its rows to another.
LEASE_SECONDS = 90
# After a failed send: 30 s, 1 min, 2 min, … at most 30 min between attempts, for ever: an
# alert is dropped by nobody, it waits for the channel to come back.
RETRY_BASE_SECONDS = 30
RETRY_CAP_SECONDS = 1800


@dataclass(frozen=True)
class Leased:
    id: uuid.UUID
    kind: str
    key: str
    payload: dict[str, Any]
    attempt: int
    delivered: list[str]
    created_at: datetime
    # Why the stored row cannot be sent as it is ("" for a good row): its payload is not a
    # JSON object, or cannot be decoded.
    problem: str = ""


def notify(kind: str, key: str, payload: dict[str, Any]) -> bool:
    """Enqueue an alert unless one of this kind and key exists. Returns whether it was new.

    `key` names the thing (a halt's id; for a limit, "<limit>:<window start>") so that one
    breach of one window alerts once however many claims it refuses."""
    kind = AlertKind(kind).value
    if not key or len(key) > Alert._meta.get_field("key").max_length:
        raise ValueError(f"an alert key must have 1 to 300 characters, got {len(key)}")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_TABLE} (id, kind, key, payload, created_at, attempts, delivered, "
            "last_error) VALUES (%s, %s, %s, %s::jsonb, now(), 0, '[]'::jsonb, '') "
            "ON CONFLICT (kind, key) DO NOTHING",
            [uuid.uuid4(), kind, key, json.dumps(payload, cls=ExactJSONEncoder)],
        )
        return cursor.rowcount == 1


def _json(value: Any) -> Any:
    return json.loads(value, cls=ExactJSONDecoder) if isinstance(value, str) else value


def _leased(pk, kind, key, payload, attempt, delivered, created) -> Leased:
    """One leased row, decoded on its own: a row that cannot be read must not take the rest of
    the batch (or the sender's run) down with it."""
    try:
        channels = _json(delivered)
    except (ValueError, RecursionError):
        channels = []
    if not isinstance(channels, list):
        channels = []
    channels = [name for name in channels if isinstance(name, str)]
    try:
        decoded, problem = _json(payload), ""
    except (ValueError, RecursionError) as exc:
        decoded, problem = {}, f"stored payload cannot be decoded: {type(exc).__name__}"
    if not isinstance(decoded, dict):
        decoded, problem = {}, "stored payload is not a JSON object"
    return Leased(pk, kind, key, decoded, attempt, channels, created, problem)


def lease(limit: int) -> list[Leased]:
    """Take up to `limit` due alerts, in the order they became due; rows another sender holds
    are skipped."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH due AS (SELECT id, coalesce(leased_until, created_at) AS due_at
                           FROM {_TABLE}
                          WHERE sent_at IS NULL
                            AND (leased_until IS NULL OR leased_until <= now())
                          ORDER BY coalesce(leased_until, created_at), created_at, id
                          LIMIT %(limit)s
                            FOR UPDATE SKIP LOCKED)
            UPDATE {_TABLE} a
               SET leased_until = now() + make_interval(secs => %(lease)s),
                   attempts = a.attempts + 1
              FROM due
             WHERE a.id = due.id
            RETURNING a.id, a.kind, a.key, a.payload, a.attempts, a.delivered, a.created_at,
                      due.due_at
            """,
            {"lease": LEASE_SECONDS, "limit": limit},
        )
        # Django has psycopg hand jsonb over as text; decode it as the model field does.
        rows = cursor.fetchall()
    rows.sort(key=lambda row: (row[7], row[6], str(row[0])))
    return [_leased(*row[:7]) for row in rows]


def retry_delay(attempt: int) -> int:
    return min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** min(attempt - 1, 16))


def finish(alert: Leased, delivered: list[str], error: str = "", *, note: str = "") -> bool:
    """Record a send: sent when `error` is empty, otherwise due again after the backoff.
    `note` is kept as last_error of a row that is done without being delivered (a callback
    given up). Returns False when the lease was lost (another sender took the row over)."""
    done = json.dumps(sorted(set(alert.delivered) | set(delivered)))
    if error:
        assignments = (
            "leased_until = now() + make_interval(secs => %(delay)s), last_error = %(error)s"
        )
    else:
        assignments = "sent_at = now(), leased_until = NULL, last_error = %(error)s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_TABLE} SET {assignments}, delivered = %(done)s::jsonb "
            "WHERE id = %(id)s AND attempts = %(attempt)s AND sent_at IS NULL",
            {
                "id": alert.id,
                "attempt": alert.attempt,
                "done": done,
                # Errors quote what failed (a URL, a header): one line, and never a NUL byte,
                # which PostgreSQL text refuses and which would make the record itself fail.
                "error": one_line(error or note)[:2000],
                "delay": retry_delay(alert.attempt),
            },
        )
        return cursor.rowcount == 1


def back_off(alert: Leased) -> bool:
    """The last resort when `finish` itself failed for this row: hold it back for its backoff
    with nothing taken from the row in the statement, so that it cannot fail the same way."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_TABLE} SET leased_until = now() + make_interval(secs => %(delay)s), "
            "last_error = 'the failure could not be recorded; see the sender log' "
            "WHERE id = %(id)s AND attempts = %(attempt)s AND sent_at IS NULL",
            {"id": alert.id, "attempt": alert.attempt, "delay": retry_delay(alert.attempt)},
        )
        return cursor.rowcount == 1
