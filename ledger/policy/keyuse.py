"""When an agent key was last used, written at most once a minute per key and never in a
statement of its own.

Authentication (`ledger.policy.agentkeys`) reads the key's last use in the query that finds the key,
and this process remembers when the key is next due. A call whose key is due carries the key's
id in a context variable; the call's first write (`ledger.effects.transitions.record_event`, which
every
intent, claim, outcome and cancellation makes, and the heartbeat's UPDATE) puts `stamp()` in
front of its own statement as a data-modifying `WITH`. So the stamp commits or rolls back with
the call's own write and costs no round trip; a call that writes nothing (a GET) stamps nothing.

The SQL itself keeps "at most once a minute": it updates only a row whose `last_used_at` is
older than that, and skips a row another transaction is stamping (`SKIP LOCKED`) rather than
wait for it. What a process remembers only saves it from adding the `WITH` to every write; the
next authenticating query corrects it from the database.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from django.core.signals import request_finished, request_started

from ledger.models import ApiKey

INTERVAL_SECONDS = 60

_TABLE = ApiKey._meta.db_table
# A data-modifying WITH runs once, to completion, whether or not the main statement reads it.
_STAMP_CTE = (
    f"key_used AS (UPDATE {_TABLE} SET last_used_at = now() WHERE id = ("
    f"SELECT id FROM {_TABLE} WHERE id = %s AND (last_used_at IS NULL OR "
    f"last_used_at <= now() - make_interval(secs => {INTERVAL_SECONDS})) "
    "FOR UPDATE SKIP LOCKED){condition})"
)

# key id → time.monotonic() from which the key is due again, in this process.
_due: dict[int, float] = {}
# The key of this call, when it is due. Threads of a gthread worker each have their own.
_pending: ContextVar[int | None] = ContextVar("ledger_key_due", default=None)


def observe(key_id: int, age_seconds: float | None) -> None:
    """The database says the key was last used `age_seconds` ago (None: never)."""
    wait = 0.0 if age_seconds is None else INTERVAL_SECONDS - age_seconds
    _due[key_id] = time.monotonic() + wait


def arm(key_id: int) -> None:
    """An authenticated call with this key begins: its first write stamps the key if due."""
    _pending.set(key_id if time.monotonic() >= _due.get(key_id, 0.0) else None)


def stamp() -> tuple[str, list[Any]]:
    """The `WITH` clause that stamps this call's key, and its parameters; ("", []) when the key
    is not due. One stamp per call: the clause is handed out once."""
    cte, params = stamp_cte()
    return (f"WITH {cte} " if cte else ""), params


def stamp_cte(only_if: str = "") -> tuple[str, list[Any]]:
    """`stamp()` as one common table expression, for a statement that has a `WITH` of its own:
    ("key_used AS (…)", [key id]), or ("", []) when the key is not due. `only_if` is SQL that
    must hold for the stamp to be written (that the statement's own write took place)."""
    key_id = _pending.get()
    if key_id is None:
        return "", []
    _pending.set(None)
    _due[key_id] = time.monotonic() + INTERVAL_SECONDS
    return _STAMP_CTE.format(condition=f" AND {only_if}" if only_if else ""), [key_id]


def _forget(**kwargs: object) -> None:
    # A thread serves request after request: what one call armed must not reach the next one
    # (a webhook has no key), nor work the thread does outside a request.
    _pending.set(None)


request_started.connect(_forget, dispatch_uid="ledger-keyuse-started")
request_finished.connect(_forget, dispatch_uid="ledger-keyuse-finished")
