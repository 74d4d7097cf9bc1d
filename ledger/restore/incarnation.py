"""Noticing, within a running process, that the database server under it changed.

A failover or a restore does not restart the ledger's processes: their connections break, and
the next ones reach whichever server is now the primary (`target_session_attrs=read-write`).
Each new connection reads which server it reached (its address, port and postmaster start
time: one query per new connection, none on a connection kept open). When that differs from the
server the process was on before, the next agent request (one with a key: the schema, /health
and /metrics read no effect) first compares the database with the witness
(`ledger.restore.mode.check_witness`), so restore mode is on before an intent is recorded on a
database that may have lost it, rather than up to a minute later by the sweep.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import DatabaseError, connection
from django.db.backends.signals import connection_created

log = logging.getLogger(__name__)

_lock = threading.Lock()
_seen: tuple[Any, ...] | None = None
_due = False


def _reached(sender: Any, connection: Any, **kwargs: Any) -> None:
    """On each new connection of the default database: which server it reached."""
    global _seen, _due
    if connection.alias != "default" or connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_postmaster_start_time(), inet_server_addr()::text, inet_server_port()"
            )
            server = tuple(cursor.fetchone())
    except DatabaseError:
        return  # the request's own query meets the same failure and answers for it
    with _lock:
        if _seen is not None and server != _seen:
            log.warning("the database server changed (%s, then %s)", _seen, server)
            _due = True
        _seen = server


def watch() -> None:
    connection_created.connect(_reached, dispatch_uid="ledger.restore.incarnation")


def check_if_moved() -> bool:
    """At the start of an agent request, outside any transaction: connect (a no-op on an open
    connection) and, if this process is on another server than before, compare with the
    witness first. Returns whether it compared. A database that cannot be reached is left to
    the request, which answers 503 as before."""
    global _due
    try:
        connection.ensure_connection()
    except DatabaseError:
        return False
    if not _due:
        return False
    from ledger.restore import mode  # imported late: this module is loaded by the app's ready()

    mode.check_witness()
    with _lock:
        _due = False
    return True
