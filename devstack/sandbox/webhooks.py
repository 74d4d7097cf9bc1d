"""Signed webhooks from a sandbox provider, delivered from an outbox table until accepted.

The signature is the one the ledger checks (`X-Ledger-Signature: t=<unix>,v1=<hex>`, the hex
being HMAC-SHA256(secret, "<t>." + raw body)). It is written out here rather than imported
from `ledger.api.webhooks` on purpose: the provider is the outside world and must not share code
(or a bug) with the service it calls.

Like a real provider, delivery is at least once: a delivery row is written in the same
transaction as the change it announces, retried with backoff on connection errors and 5xx,
and resumed after a restart; a 4xx answer means the receiver refused it for good.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from devstack.sandbox.store import Store

OUTBOX = """
CREATE TABLE IF NOT EXISTS {table} (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    subject TEXT NOT NULL,                   -- the id of what it announces (a charge)
    url TEXT NOT NULL,
    body BLOB NOT NULL,                      -- the exact bytes signed and sent on every attempt
    status TEXT NOT NULL DEFAULT 'pending',  -- pending | delivered | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    last_status INTEGER,
    last_error TEXT,
    created REAL NOT NULL,
    finished REAL
);
-- Read by WebhookSender.dispatch(): what is still to deliver.
CREATE INDEX IF NOT EXISTS {table}_pending
    ON {table} (seq) WHERE status = 'pending';
"""
SCHEMA = OUTBOX.format(table="webhook_deliveries")

# Seconds between attempts; at least one second, so that every attempt carries a new
# timestamp and therefore a new signature (the ledger refuses a signature it has seen).
BACKOFF = (1, 2, 4, 8)
TIMEOUT = 5


class DeliveryThreads:
    """A delivery thread per outbox row, never two at once for the same row: `dispatch` may
    find a row still pending while its thread waits to try again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: set[int] = set()

    def start(self, seq: int, deliver: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if seq in self._in_flight:
                return
            self._in_flight.add(seq)
        threading.Thread(target=self._run, args=(seq, deliver, *args), daemon=True).start()

    def _run(self, seq: int, deliver: Callable[..., None], *args: Any) -> None:
        try:
            deliver(seq, *args)
        finally:
            with self._lock:
                self._in_flight.discard(seq)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


class WebhookSender:
    # The outbox it delivers from and the header its signature travels in; a provider that
    # speaks another's scheme (the Stripe face, `Stripe-Signature`) has an outbox of its own.
    table = "webhook_deliveries"
    header = "X-Ledger-Signature"

    def __init__(self, store: Store, url: str, secret: str, agent: str) -> None:
        self.store = store
        self.url = url
        self.secret = secret
        self.agent = agent
        self._stopping = threading.Event()
        self._threads = DeliveryThreads()
        # Never through an HTTP proxy from the environment: the receiver is local.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def record(self, db: sqlite3.Connection, subject: str, body: bytes) -> None:
        """Queue a delivery inside the caller's transaction (a transactional outbox)."""
        db.execute(
            f"INSERT INTO {self.table} (subject, url, body, created) VALUES (?, ?, ?, ?)",
            (subject, self.url, body, time.time()),
        )

    def dispatch(self) -> None:
        """Start a delivery thread for every pending delivery that has none yet."""
        with self.store.reading() as db:
            rows = db.execute(
                f"SELECT seq, url, body FROM {self.table} WHERE status = 'pending' ORDER BY seq"
            ).fetchall()
        for row in rows:
            self._threads.start(row["seq"], self._deliver, row["url"], row["body"])

    def stop(self) -> None:
        self._stopping.set()

    def _deliver(self, seq: int, url: str, body: bytes) -> None:
        for pause in (*BACKOFF, None):
            status, error = self._post(url, body)
            if status is not None and 200 <= status < 300:
                outcome = "delivered"
            elif (status is not None and status < 500) or pause is None:
                outcome = "failed"
            else:
                outcome = "pending"
            self._note(seq, status, error, outcome)
            if outcome != "pending" or self._stopping.wait(pause):
                return

    def _post(self, url: str, body: bytes) -> tuple[int | None, str | None]:
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": self.agent,
                self.header: sign(self.secret, int(time.time()), body),
            },
        )
        try:
            with self._opener.open(request, timeout=TIMEOUT) as response:
                return response.status, None
        except urllib.error.HTTPError as error:
            return error.code, f"HTTP {error.code}"
        except (urllib.error.URLError, OSError) as error:
            return None, str(error)

    def _note(self, seq: int, status: int | None, error: str | None, outcome: str) -> None:
        finished = None if outcome == "pending" else time.time()
        with self.store.transaction() as db:
            db.execute(
                f"UPDATE {self.table} SET attempts = attempts + 1, last_status = ?,"
                " last_error = ?, status = ?, finished = ? WHERE seq = ?",
                (status, error, outcome, finished, seq),
            )
        sys.stderr.write(f"{self.agent}: webhook {seq} → {status or error} ({outcome})\n")


def deliveries(store: Store, table: str = "webhook_deliveries") -> list[dict[str, Any]]:
    """Every delivery with its attempts, for `GET /_sandbox/webhooks`."""
    with store.reading() as db:
        rows = db.execute(f"SELECT * FROM {table} ORDER BY seq").fetchall()
    return [{**dict(row), "body": row["body"].decode()} for row in rows]
