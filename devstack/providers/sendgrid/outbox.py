"""The fake SendGrid's Signed Event Webhook: an ECDSA P-256 key pair of its own, and an outbox
of event batches, signed when they leave (over the timestamp followed by the body, as SendGrid
signs), delivered to `--webhook-url` until accepted or handed to whoever asks
(`GET /_sandbox/outbox`).

The private key lives in the fake's store, so that a restarted fake signs with the same key;
the public key (base64 DER, as SendGrid's console shows it) is what the ledger is configured
with (`LEDGER_WEBHOOK_SECRETS=sendgrid:<key>`).
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from devstack.sandbox.store import Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS signing_key (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    private_pem BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    body BLOB NOT NULL,                      -- the JSON array of events, as signed
    status TEXT NOT NULL DEFAULT 'pending',  -- pending | delivered | taken | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    due REAL NOT NULL,
    last_status INTEGER
);
"""
BACKOFF = (1, 2, 4, 8)  # seconds between attempts; each attempt is signed anew
TIMEOUT = 5


def signing_key(store: Store) -> ec.EllipticCurvePrivateKey:
    """The fake's key, made at its first start and kept in its store."""
    with store.transaction() as db:
        row = db.execute("SELECT private_pem FROM signing_key WHERE id = 1").fetchone()
        if row is None:
            key = ec.generate_private_key(ec.SECP256R1())
            pem = key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            db.execute("INSERT INTO signing_key (id, private_pem) VALUES (1, ?)", (pem,))
            return key
    loaded = serialization.load_pem_private_key(bytes(row["private_pem"]), password=None)
    assert isinstance(loaded, ec.EllipticCurvePrivateKey)
    return loaded


def public_key_b64(key: ec.EllipticCurvePrivateKey) -> str:
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


def signed_headers(key: ec.EllipticCurvePrivateKey, body: bytes, stamp: int) -> dict[str, str]:
    signature = key.sign(str(stamp).encode() + body, ec.ECDSA(hashes.SHA256()))
    return {
        "Content-Type": "application/json",
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": str(stamp),
    }


class EventSender:
    """Delivers the outbox to a URL from a thread of its own (when there is a URL)."""

    def __init__(self, store: Store, key: ec.EllipticCurvePrivateKey, url: str | None) -> None:
        self.store, self.key, self.url = store, key, url
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, db: Any, body: bytes, delay: float) -> None:
        """Queue a batch in the transaction of the send it announces."""
        db.execute("INSERT INTO outbox (body, due) VALUES (?, ?)", (body, time.time() + delay))

    def take(self) -> list[dict[str, Any]]:
        """Every pending batch, signed now, marked taken (for a receiver that is not reachable
        from the fake: the tests hand them over themselves)."""
        with self.store.transaction() as db:
            rows = db.execute("SELECT seq, body FROM outbox WHERE status = 'pending'").fetchall()
            db.execute("UPDATE outbox SET status = 'taken' WHERE status = 'pending'")
        stamp = int(time.time())
        return [
            {
                "seq": row["seq"],
                "body": bytes(row["body"]).decode(),
                "headers": signed_headers(self.key, bytes(row["body"]), stamp),
            }
            for row in rows
        ]

    def deliveries(self) -> list[dict[str, Any]]:
        """Every batch with how its delivery went (the events' message ids, for finding one)."""
        with self.store.reading() as db:
            rows = db.execute("SELECT * FROM outbox ORDER BY seq").fetchall()
        return [
            {
                "seq": row["seq"],
                "messages": sorted({e["sg_message_id"] for e in json.loads(row["body"])}),
                "status": row["status"],
                "attempts": row["attempts"],
                "last_status": row["last_status"],
            }
            for row in rows
        ]

    def start(self) -> None:
        if self.url and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="events", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self.store.reading() as db:
                rows = db.execute(
                    "SELECT seq, body, attempts FROM outbox WHERE status = 'pending' AND due <= ?"
                    " ORDER BY seq LIMIT 20",
                    (time.time(),),
                ).fetchall()
            for row in rows:
                self._deliver(row["seq"], bytes(row["body"]), row["attempts"])

    def _deliver(self, seq: int, body: bytes, attempts: int) -> None:
        assert self.url is not None
        headers = signed_headers(self.key, body, int(time.time()))
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        status = 0
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                status = answer.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError as exc:
            sys.stderr.write(f"sandbox sendgrid: event batch {seq} not delivered: {exc}\n")
        if 200 <= status < 300:
            outcome, due = "delivered", 0.0
        elif attempts + 1 > len(BACKOFF):
            outcome, due = "failed", 0.0
        else:
            outcome, due = "pending", time.time() + BACKOFF[attempts]
        with self.store.transaction() as db:
            db.execute(
                "UPDATE outbox SET status = ?, attempts = attempts + 1, due = ?, last_status = ?"
                " WHERE seq = ?",
                (outcome, due, status, seq),
            )
