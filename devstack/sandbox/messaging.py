"""A sandbox messaging provider (mail / SMS) that offers no safety net at all.

Like many real ones, it has no idempotency keys (an `Idempotency-Key` header is ignored, so
every POST sends another message) and no way to ask what was sent. After a lost response
nobody but a human can tell whether the message went out: the ledger's `unsafe` case.

    python -m devstack.sandbox.messaging --port 8102
"""

from __future__ import annotations

import time
from typing import Any

from devstack.sandbox.faults import Faults
from devstack.sandbox.service import HttpError, Provider, Reply, Request, main, new_id

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    recipient TEXT NOT NULL,
    subject TEXT,
    body TEXT NOT NULL,
    received_key TEXT,  -- an Idempotency-Key header the client sent anyway; tests only
    created INTEGER NOT NULL
);
"""


def _invalid(message: str) -> HttpError:
    return HttpError(400, "invalid_request", message)


class MessagingProvider(Provider):
    """A sandbox messaging provider without idempotency keys or lookups."""

    name = "messaging"
    default_port = 8102
    schema = SCHEMA

    def handle(self, request: Request, faults: Faults) -> Reply:
        if (request.method, request.path) == ("POST", "/messages"):
            return self.send(request)
        # Deliberately no GET /messages/{id}: this provider cannot be asked what it sent.
        raise HttpError(404, "not_found", f"No such endpoint: {request.method} {request.path}.")

    def send(self, request: Request) -> Reply:
        body = request.json()
        unknown = sorted(set(body) - {"to", "subject", "body"})
        if unknown:
            raise _invalid(f"Received unknown parameter: {unknown[0]}.")
        to, subject, text = body.get("to"), body.get("subject"), body.get("body")
        if not isinstance(to, str) or not to or len(to) > 320:
            raise _invalid("`to` must be a non-empty string of at most 320 characters.")
        if subject is not None and (not isinstance(subject, str) or len(subject) > 998):
            raise _invalid("`subject` must be a string of at most 998 characters.")
        if not isinstance(text, str) or len(text) > 100_000:
            raise _invalid("`body` must be a string of at most 100000 characters.")
        message_id = new_id("msg")
        created = int(time.time())
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO messages (id, recipient, subject, body, received_key, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (message_id, to, subject, text, request.header("Idempotency-Key"), created),
            )
        return Reply(
            201,
            {
                "id": message_id,
                "object": "message",
                "to": to,
                "subject": subject,
                "status": "sent",
                "created": created,
            },
        )

    def transactions(self) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute("SELECT * FROM messages ORDER BY seq").fetchall()
        return [
            {
                "id": row["id"],
                "object": "message",
                "to": row["recipient"],
                "subject": row["subject"],
                "body": row["body"],
                "status": "sent",
                "received_idempotency_key": row["received_key"],
                "created": row["created"],
            }
            for row in rows
        ]

    def reset(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM messages")


if __name__ == "__main__":
    main(MessagingProvider)
