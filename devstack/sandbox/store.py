"""A provider's durable memory: one SQLite file in WAL mode, one transaction per request.

A real provider that answered "201 Created" still has the charge after a crash; so does this
one, because the handler returns its answer only after `transaction()` committed, and commits
are fully synced (`synchronous=FULL`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Store:
    def __init__(self, path: Path, schema: str) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        db = self._connect()
        try:
            # executescript runs its own transaction; the schema uses IF NOT EXISTS throughout,
            # so starting on an existing store changes nothing.
            db.executescript(schema)
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        # A connection per transaction: ThreadingHTTPServer runs every request in a new
        # thread, and opening a SQLite file costs microseconds.
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, committed when the block ends without an exception.

        BEGIN IMMEDIATE takes the write lock up front, so two requests with the same
        idempotency key are serialised: the second one sees the first one's row.
        """
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for lookups; never blocks the writers (WAL)."""
        db = self._connect()
        try:
            db.execute("BEGIN")
            yield db
            db.execute("COMMIT")
        finally:
            db.close()
