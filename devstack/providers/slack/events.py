"""The fake Slack's Events API deliveries: signed as Slack signs them, retried as Slack retries.

Each posted message is announced to the configured Request URL as an `event_callback` whose
event is a `message`, from an outbox table written in the same transaction as the message
(delivered at least once, resumed after a restart). Every attempt is signed afresh:
`X-Slack-Request-Timestamp` and `X-Slack-Signature: v0=HMAC-SHA256(secret,
"v0:<timestamp>:<body>")`; a retry also carries `X-Slack-Retry-Num` and `X-Slack-Retry-Reason`.
Slack retries three times (at once, after a minute, after five); the fake after 1, 2 and 4
seconds. The signing is written out here, not imported from the ledger: the provider is the
outside world and must not share code (or a bug) with the service it calls.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from devstack.sandbox.store import Store
from devstack.sandbox.webhooks import DeliveryThreads

SCHEMA = """
CREATE TABLE IF NOT EXISTS event_deliveries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    body BLOB NOT NULL,                      -- the exact bytes signed on every attempt
    status TEXT NOT NULL DEFAULT 'pending',  -- pending | delivered | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    last_status INTEGER,
    last_error TEXT,
    created REAL NOT NULL
);
"""
BACKOFF = (1, 2, 4)  # seconds before each retry: three retries, as Slack makes
TIMEOUT = 3  # Slack waits three seconds for an answer


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Slack's v0 request signature of a body sent at `timestamp`."""
    base = f"v0:{timestamp}:".encode() + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    stamp = int(time.time()) if timestamp is None else timestamp
    return {
        "Content-Type": "application/json",
        "User-Agent": "Slackbot 1.0 (fake)",
        "X-Slack-Request-Timestamp": str(stamp),
        "X-Slack-Signature": signature(secret, stamp, body),
    }


class EventSender:
    def __init__(self, store: Store, url: str, secret: str) -> None:
        self.store = store
        self.url = url
        self.secret = secret
        self._stopping = threading.Event()
        self._threads = DeliveryThreads()
        # Never through an HTTP proxy from the environment: the receiver is local.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def record(self, db: sqlite3.Connection, event_id: str, envelope: dict[str, Any]) -> None:
        """Queue a delivery inside the caller's transaction (a transactional outbox)."""
        db.execute(
            "INSERT INTO event_deliveries (event_id, body, created) VALUES (?, ?, ?)",
            (event_id, json.dumps(envelope).encode(), time.time()),
        )

    def dispatch(self) -> None:
        """Start a delivery thread for every pending delivery that has none yet."""
        with self.store.reading() as db:
            rows = db.execute(
                "SELECT seq, body, attempts FROM event_deliveries WHERE status = 'pending'"
                " ORDER BY seq"
            ).fetchall()
        for row in rows:
            self._threads.start(row["seq"], self._deliver, row["body"], row["attempts"])

    def stop(self) -> None:
        self._stopping.set()

    def post(self, body: bytes, retry: int = 0, reason: str = "") -> tuple[int | None, bytes]:
        """One signed POST to the Request URL: its status (None: no answer) and body."""
        headers = signed_headers(self.secret, body)
        if retry:
            headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": reason}
        request = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with self._opener.open(request, timeout=TIMEOUT) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (urllib.error.URLError, OSError) as error:
            return None, str(error).encode()

    def _deliver(self, seq: int, body: bytes, done: int) -> None:
        reason = "http_error"
        for attempt in range(done, len(BACKOFF) + 1):
            if attempt and self._stopping.wait(BACKOFF[attempt - 1]):
                return
            status, answer = self.post(body, attempt, reason)
            delivered = status is not None and 200 <= status < 300
            finished = delivered or attempt == len(BACKOFF)
            outcome = "delivered" if delivered else "failed" if finished else "pending"
            self._note(seq, status, answer, outcome)
            if finished:
                return
            reason = "http_timeout" if status is None else "http_error"

    def _note(self, seq: int, status: int | None, answer: bytes, outcome: str) -> None:
        with self.store.transaction() as db:
            db.execute(
                "UPDATE event_deliveries SET attempts = attempts + 1, last_status = ?,"
                " last_error = ?, status = ? WHERE seq = ?",
                (status, answer[:500].decode(errors="replace"), outcome, seq),
            )
        sys.stderr.write(f"fake slack: event delivery {seq} → {status} ({outcome})\n")

    def deliveries(self) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute("SELECT * FROM event_deliveries ORDER BY seq").fetchall()
        return [
            {
                "seq": row["seq"],
                "event_id": row["event_id"],
                "status": row["status"],
                "attempts": row["attempts"],
                "last_status": row["last_status"],
                "last_error": row["last_error"],
                "body": json.loads(row["body"]),
            }
            for row in rows
        ]
