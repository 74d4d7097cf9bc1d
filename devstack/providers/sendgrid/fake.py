"""A fake SendGrid on loopback, answering in SendGrid's documented shapes: v3 Mail Send
(`POST /v3/mail/send`: 202, an empty body and `X-Message-Id`), the Email Activity API
(`GET /v3/messages?query=…`, `GET /v3/messages/{msg_id}`) and the Signed Event Webhook
(`outbox`). Like SendGrid it keeps no idempotency keys: every accepted request is more email.

    python -m devstack.providers.sendgrid.fake --port 0 --api-key SG.test \
        --activity-lag 2 --webhook-url http://127.0.0.1:8000/api/v1/callbacks/sendgrid

What becomes of a message is chosen by its recipient, for tests: an address starting with
`drop` is dropped (never sent), with `bounce` processed and bounced, any other processed and
delivered. The activity shows a message only `--activity-lag` seconds after it was sent
(SendGrid's search is eventually consistent); `POST /_sandbox/activity` changes the lag and
makes the next activity requests answer 429 with SendGrid's rate-limit headers
(`rate_limited`, `reset_in`), cut their JSON short (`truncated` searches,
`truncated_details` message details) or ignore the query
(`unfiltered`). The fault knobs of `devstack.sandbox` apply (`X-Sandbox-Fault: hang=1`, …).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devstack.providers.sendgrid.outbox import SCHEMA as OUTBOX_SCHEMA
from devstack.providers.sendgrid.outbox import EventSender, public_key_b64, signing_key
from devstack.sandbox.faults import Faults
from devstack.sandbox.service import Options, Provider, Reply, Request, add_arguments, serve
from devstack.sandbox.service import options_from as sandbox_options

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id TEXT NOT NULL UNIQUE,
    request_id TEXT NOT NULL,       -- the X-Message-Id of the request that sent it
    to_email TEXT NOT NULL,
    from_email TEXT NOT NULL,
    subject TEXT NOT NULL,
    custom_args TEXT NOT NULL,      -- JSON object
    outcome TEXT NOT NULL,          -- delivered | bounced | dropped
    created REAL NOT NULL
);
"""
    + OUTBOX_SCHEMA
)
DEFAULT_API_KEY = "SG.fake-sendgrid-key"
RATE_LIMIT = 6  # Email Activity API requests a minute
_CLAUSE = re.compile(
    r"""\(?\s*(?:unique_args\['(?P<arg>[^'\]]{1,100})'\]|(?P<field>msg_id|to_email|status))"""
    r"""\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*\)?"""
)


class SendGridError(Exception):
    """An error answer in SendGrid's shape: `{"errors": [{"message", "field", "help"}]}`."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field

    def reply(self, headers: dict[str, str] | None = None) -> Reply:
        error = {"message": self.message, "field": self.field, "help": None}
        return Reply(self.status, {"errors": [error]}, headers=headers or {})


@dataclass
class Settings:
    api_key: str = DEFAULT_API_KEY
    activity_lag: float = 0.0
    webhook_url: str | None = None
    events_delay: float = 0.2


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeSendGrid(Provider):
    """SendGrid's Mail Send, Email Activity and Signed Event Webhook, on loopback."""

    name = "sendgrid"
    default_port = 8106
    schema = SCHEMA

    def __init__(self, options: Options, settings: Settings | None = None) -> None:
        super().__init__(options)
        self.settings = settings or Settings()
        self.key = signing_key(self.store)
        self.events = EventSender(self.store, self.key, self.settings.webhook_url)
        self.limited = 0  # activity requests still to answer 429
        self.reset_in = 30
        # Searches, and message details, still to answer with their JSON cut short.
        self.cuts = {"truncated": 0, "truncated_details": 0}
        self.unfiltered = False  # searches answered with every message, whatever the query

    def start(self) -> None:
        self.events.start()

    def stop(self) -> None:
        self.events.stop()

    def handle(self, request: Request, faults: Faults) -> Reply:
        try:
            self._authorize(request)
            if (request.method, request.path) == ("POST", "/v3/mail/send"):
                return self.send(request)
            if request.method == "GET" and request.path.startswith("/v3/messages"):
                return self.activity(request)
            raise SendGridError(404, "resource not found")
        except SendGridError as error:
            return error.reply()

    def _authorize(self, request: Request) -> None:
        if request.header("Authorization") != f"Bearer {self.settings.api_key}":
            raise SendGridError(
                401, "The provided authorization grant is invalid, expired, or revoked"
            )

    # --- Mail Send ----------------------------------------------------------------------

    def send(self, request: Request) -> Reply:
        try:
            body = json.loads(request.body)
        except ValueError:
            raise SendGridError(400, "Bad Request") from None
        recipients, sender, subject, args = _mail(body)
        request_id = secrets.token_urlsafe(16)[:22]
        now = time.time()
        batch: list[dict[str, Any]] = []
        with self.store.transaction() as db:
            for n, (to, own_args) in enumerate(recipients):
                msg_id = f"{request_id}.filterdrecv-fake-{n}.0"
                merged = {**args, **own_args}
                outcome = _outcome(to)
                db.execute(
                    "INSERT INTO messages (msg_id, request_id, to_email, from_email, subject,"
                    " custom_args, outcome, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (msg_id, request_id, to, sender, subject, json.dumps(merged), outcome, now),
                )
                batch += _webhook_events(msg_id, to, merged, outcome, now)
            self.events.add(db, json.dumps(batch).encode(), self.settings.events_delay)
        return Reply(202, raw=b"", headers={"X-Message-Id": request_id})

    # --- Email Activity -----------------------------------------------------------------

    def activity(self, request: Request) -> Reply:
        if self.limited > 0:
            self.limited -= 1
            reset = str(int(time.time()) + self.reset_in)
            headers = {
                "X-RateLimit-Limit": str(RATE_LIMIT),
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": reset,
            }
            return SendGridError(429, "too many requests").reply(headers)
        visible_before = time.time() - self.settings.activity_lag
        if request.path == "/v3/messages":
            reply, knob = self._search(request, visible_before), "truncated"
        else:
            reply = self._message(request.path.removeprefix("/v3/messages/"), visible_before)
            knob = "truncated_details"
        if self.cuts[knob] > 0:
            self.cuts[knob] -= 1
            whole = json.dumps(reply.payload).encode()
            return Reply(200, raw=whole[: len(whole) // 2])
        return reply

    def _message(self, msg_id: str, visible_before: float) -> Reply:
        with self.store.reading() as db:
            row = db.execute(
                "SELECT * FROM messages WHERE msg_id = ? AND created <= ?", (msg_id, visible_before)
            ).fetchone()
        if row is None:
            raise SendGridError(404, "Not Found")
        return Reply(200, _details(row))

    def _search(self, request: Request, visible_before: float) -> Reply:
        clauses = _parse_query(request.query.get("query"))
        raw_limit = request.query.get("limit", "10")
        if not raw_limit.isdecimal() or not 1 <= int(raw_limit) <= 1000:
            raise SendGridError(400, "limit must be between 1 and 1000", "limit")
        with self.store.reading() as db:
            rows = db.execute(
                "SELECT * FROM messages WHERE created <= ? ORDER BY seq DESC", (visible_before,)
            ).fetchall()
        chosen = [
            row
            for row in rows
            if self.unfiltered or all(_matches(row, clause) for clause in clauses)
        ]
        return Reply(200, {"messages": [_abbreviated(row) for row in chosen[: int(raw_limit)]]})

    # --- the sandbox's own endpoints ----------------------------------------------------

    def inspect(self, request: Request) -> Reply | None:
        match request.method, request.path:
            case "GET", "/_sandbox/public_key":
                return Reply(200, {"public_key": public_key_b64(self.key)})
            case "GET", "/_sandbox/outbox":
                return Reply(200, {"data": self.events.take()})
            case "GET", "/_sandbox/deliveries":
                return Reply(200, {"data": self.events.deliveries()})
            case "POST", "/_sandbox/activity":
                body = request.json()
                if "lag" in body:
                    self.settings.activity_lag = float(body["lag"])
                self.limited = int(body.get("rate_limited", self.limited))
                self.reset_in = int(body.get("reset_in", self.reset_in))
                for knob in self.cuts:
                    self.cuts[knob] = int(body.get(knob, self.cuts[knob]))
                self.unfiltered = bool(body.get("unfiltered", self.unfiltered))
                return Reply(200, {"lag": self.settings.activity_lag, "limited": self.limited})
        return None

    def transactions(self) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute("SELECT * FROM messages ORDER BY seq").fetchall()
        return [
            {**_abbreviated(row), "request_id": row["request_id"], "outcome": row["outcome"],
             "custom_args": json.loads(row["custom_args"])}
            for row in rows
        ]  # fmt: skip

    def reset(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM messages")
            db.execute("DELETE FROM outbox")


def _invalid(message: str, field: str) -> SendGridError:
    return SendGridError(400, message, field)


def _email(value: Any, field: str) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("email"), str):
        raise _invalid("The email address is required.", field)
    email = value["email"]
    if "@" not in email or len(email) > 320:
        raise _invalid("Does not contain a valid address.", field)
    return email


def _mail(body: Any) -> tuple[list[tuple[str, dict[str, str]]], str, str, dict[str, str]]:
    """The recipients (with their own custom args), sender, subject and custom args of a
    v3 Mail Send body, or SendGrid's 400 for what it refuses."""
    if not isinstance(body, dict):
        raise SendGridError(400, "Bad Request")
    people = body.get("personalizations")
    if not isinstance(people, list) or not 1 <= len(people) <= 1000:
        raise _invalid("The personalizations field is required.", "personalizations")
    sender = _email(body.get("from"), "from.email")
    subject = body.get("subject")
    if not isinstance(subject, str) or not subject:
        raise _invalid("The subject is required.", "subject")
    content = body.get("content")
    if (
        not isinstance(content, list)
        or not content
        or not all(
            isinstance(c, dict)
            and isinstance(c.get("type"), str)
            and isinstance(c.get("value"), str)
            for c in content
        )
    ):
        raise _invalid("Unless a valid template_id is provided, content is required.", "content")
    args = _custom_args(body.get("custom_args", {}), "custom_args")
    recipients = []
    for n, person in enumerate(people):
        to = person.get("to") if isinstance(person, dict) else None
        if not isinstance(to, list) or not to:
            raise _invalid("The to array is required.", f"personalizations.{n}.to")
        own = _custom_args(person.get("custom_args", {}), f"personalizations.{n}.custom_args")
        recipients += [(_email(t, f"personalizations.{n}.to"), own) for t in to]
    return recipients, sender, subject, args


def _custom_args(value: Any, field: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _invalid("Custom args must be an object of string values.", field)
    if len(json.dumps(value)) > 10_000:
        raise _invalid("Custom args must be less than 10000 bytes.", field)
    return value


def _outcome(to: str) -> str:
    local = to.split("@", 1)[0].lower()
    return (
        "dropped"
        if local.startswith("drop")
        else "bounced"
        if local.startswith("bounce")
        else ("delivered")
    )


def _webhook_events(
    msg_id: str, to: str, args: dict[str, str], outcome: str, now: float
) -> list[dict[str, Any]]:
    """The Event Webhook's events for one message (custom args at the top level)."""
    names = {"dropped": ["dropped"], "bounced": ["processed", "bounce"]}.get(
        outcome, ["processed", "delivered"]
    )
    events = []
    for name in names:
        event = {**args, "email": to, "timestamp": int(now), "event": name,
                 "smtp-id": f"<{msg_id}@fake>", "sg_event_id": secrets.token_urlsafe(16),
                 "sg_message_id": msg_id}  # fmt: skip
        if name == "dropped":
            event["reason"] = "Bounced Address"
        if name == "bounce":
            event.update(type="bounce", reason="550 5.1.1 user unknown")
        events.append(event)
    return events


def _status(row: Any) -> str:
    return "delivered" if row["outcome"] == "delivered" else "not_delivered"


def _abbreviated(row: Any) -> dict[str, Any]:
    return {
        "from_email": row["from_email"],
        "msg_id": row["msg_id"],
        "subject": row["subject"],
        "to_email": row["to_email"],
        "status": _status(row),
        "opens_count": 0,
        "clicks_count": 0,
        "last_event_time": _iso(row["created"]),
    }


def _details(row: Any) -> dict[str, Any]:
    names = {"dropped": ["dropped"], "bounced": ["processed", "bounced"]}.get(
        row["outcome"], ["processed", "delivered"]
    )
    events = [
        {"event_name": name, "processed": _iso(row["created"]), "reason": "",
         "bounce_type": "hard" if name == "bounced" else "", "http_user_agent": "",
         "mx_server": "mx.fake.example"}
        for name in names
    ]  # fmt: skip
    return {
        **_abbreviated(row),
        "template_id": "",
        "teammate": "",
        "api_key_id": "fakeapikeyid",
        "events": events,
        "originating_ip": "127.0.0.1",
        "categories": [],
        "unique_args": row["custom_args"],
        "outbound_ip": "127.0.0.1",
        "outbound_ip_type": "dedicated",
    }


def _parse_query(query: str | None) -> list[tuple[str, str, str]]:
    """The clauses of an activity query (a subset of SendGrid's language: `unique_args['x']`,
    msg_id, to_email and status compared with `=`, joined by AND)."""
    if not query:
        raise SendGridError(400, "query is required", "query")
    clauses = []
    for part in re.split(r"\s+AND\s+", query.strip()):
        match = _CLAUSE.fullmatch(part.strip())
        if match is None:
            raise SendGridError(400, f"invalid syntax: {part[:80]!r}", "query")
        value = re.sub(r"\\(.)", r"\1", match["value"])
        kind, name = ("arg", match["arg"]) if match["arg"] else ("field", match["field"])
        clauses.append((kind, name, value))
    return clauses


def _matches(row: Any, clause: tuple[str, str, str]) -> bool:
    kind, name, value = clause
    if kind == "arg":
        return json.loads(row["custom_args"]).get(name) == value
    if name == "status":
        return _status(row) == value
    return row[name] == value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.providers.sendgrid.fake", description=FakeSendGrid.__doc__
    )
    add_arguments(parser, payments=False)
    own = parser.add_argument_group("SendGrid")
    own.add_argument("--api-key", help="the API key it accepts ($SENDGRID_FAKE_API_KEY)")
    own.add_argument("--activity-lag", type=float, default=0.0, metavar="S")
    own.add_argument("--webhook-url", help="where to POST signed event batches")
    own.add_argument("--events-delay", type=float, default=0.2, metavar="S")
    values = vars(parser.parse_args(argv))
    settings = Settings(
        api_key=values["api_key"] or os.environ.get("SENDGRID_FAKE_API_KEY") or DEFAULT_API_KEY,
        activity_lag=values["activity_lag"],
        webhook_url=values["webhook_url"],
        events_delay=values["events_delay"],
    )
    try:
        options = sandbox_options({**values, "webhook_url": None}, FakeSendGrid)
    except ValueError as error:
        parser.error(str(error))
    serve(FakeSendGrid(options, settings))


if __name__ == "__main__":
    main()
