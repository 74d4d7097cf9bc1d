"""A fake Slack Web API on loopback: `chat.postMessage` and `conversations.history`, answered
in the shapes Slack documents, for the Slack adapter's tests and the crash test.

    python -m devstack.providers.slack.fake --port 8110 --bot-token xoxb-… \\
        --events-url http://127.0.0.1:8000/api/v1/callbacks/slack --signing-secret …

The Web API lives under `/api/` (the SDK's `base_url` is `<url>/api/`). Every method takes
its arguments as a form, as JSON or in the query string, and the bot token as
`Authorization: Bearer` (or a `token` argument); Slack answers HTTP 200 with
`{"ok": false, "error": …}` for what it refuses. Messages keep their metadata; history lists
them newest first, pages chained by `response_metadata.next_cursor`, and shows a message's
metadata payload only with `include_all_metadata` (or when the app's manifest declares its
event type, `--declared-metadata`). Slack keeps no idempotency keys: every post is a new
message.

Besides the sandbox's fault knobs (`X-Sandbox-Fault`, `/_sandbox/faults`):
`POST /_sandbox/ratelimit {"count": n, "retry_after": s, "methods": [...], "after": k}` lets
k calls through, then answers n calls 429 with `Retry-After` and
`{"ok": false, "error": "ratelimited"}`;
`GET /_sandbox/events` lists the Events API deliveries (`events`), and
`POST /_sandbox/url_verification` sends the Request URL check and says what came back.

Its interactive side (`interactive`, with `--interactivity-url`): incoming webhooks that take
messages with buttons, a person pressing one and submitting the modal the app opens (signed
`block_actions` and `view_submission` payloads), `views.open`, `users.info` and the presses'
`response_url`s.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from devstack.providers.slack.events import SCHEMA as EVENTS_SCHEMA
from devstack.providers.slack.events import EventSender
from devstack.providers.slack.interactive import Interactive
from devstack.sandbox.faults import Faults
from devstack.sandbox.service import (
    HttpError,
    Options,
    Provider,
    Reply,
    Request,
    add_arguments,
    options_from,
    serve,
)

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    ts TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT,                            -- JSON, as posted
    created REAL NOT NULL,
    UNIQUE (channel, ts)
);
"""
    + EVENTS_SCHEMA
)
TEAM, APP, BOT, BOT_USER = "T0FAKETEAM", "A0FAKEAPP1", "B0FAKEBOT1", "U0FAKEBOT1"
DEFAULT_TOKEN = "xoxb-fake-slack-bot-token"  # devstack.providers.slack.caller.TOKEN
MAX_TEXT = 40_000
MAX_METADATA = 8_000  # the fake's own bound; Slack answers metadata_too_large past its own
_EVENT_TYPE = re.compile(r"[a-z0-9_]{1,255}")
_TRUE = ("1", "true", "True")
_INTERACTIVE = ("views.open", "users.info")


@dataclass
class Settings:
    token: str
    channels: tuple[str, ...]
    events_url: str = ""
    signing_secret: str = ""
    declared: tuple[str, ...] = ()  # metadata event types the app's manifest declares
    interactivity_url: str = ""  # the app's interactivity Request URL


@dataclass
class RateLimit:
    count: int = 0
    retry_after: int = 30
    methods: set[str] = field(default_factory=set)
    after: int = 0  # calls let through before the limit starts


def _refused(error: str) -> Reply:
    return Reply(200, {"ok": False, "error": error})


class SlackFake(Provider):
    """A fake Slack Web API (chat.postMessage, conversations.history) and Events API sender."""

    name = "slack"
    default_port = 8110
    schema = SCHEMA

    def __init__(self, options: Options, settings: Settings) -> None:
        super().__init__(options)
        self.settings = settings
        self.events = (
            EventSender(self.store, settings.events_url, settings.signing_secret)
            if settings.events_url
            else None
        )
        self._limit = RateLimit()
        self._limit_lock = threading.Lock()
        self.interactive = Interactive(
            settings.interactivity_url, settings.signing_secret, settings.token, TEAM, APP
        )

    def handle(self, request: Request, faults: Faults) -> Reply:
        if request.path.startswith("/services/"):
            return self.interactive.incoming(request)
        if request.path.startswith("/actions/"):
            return self.interactive.respond(request)
        method = request.path.removeprefix("/api/")
        if method not in ("chat.postMessage", "conversations.history", *_INTERACTIVE):
            return Reply(404, {"ok": False, "error": "unknown_method"})
        limited = self._rate_limited(method)
        if limited is not None:
            return limited
        args = _arguments(request)
        bearer = (request.header("Authorization") or "").removeprefix("Bearer ").strip()
        token = bearer or str(args.get("token") or "")
        if not token:
            return _refused("not_authed")
        if not secrets.compare_digest(token.encode(), self.settings.token.encode()):
            return _refused("invalid_auth")
        if method in _INTERACTIVE:
            return self.interactive.method(method, args)
        if args.get("channel") not in self.settings.channels:
            return _refused("channel_not_found")
        if method == "chat.postMessage":
            return self.post(args)
        return self.history(args)

    def _rate_limited(self, method: str) -> Reply | None:
        with self._limit_lock:
            if self._limit.count <= 0 or method not in self._limit.methods:
                return None
            if self._limit.after > 0:
                self._limit.after -= 1
                return None
            self._limit.count -= 1
            wait = self._limit.retry_after
        return Reply(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(wait)})

    # --- chat.postMessage -------------------------------------------------------------------

    def post(self, args: dict[str, Any]) -> Reply:
        text = args.get("text")
        if not isinstance(text, str) or not text:
            return _refused("no_text")
        if len(text) > MAX_TEXT:
            return _refused("msg_too_long")
        metadata = args.get("metadata")
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except ValueError:
                return _refused("invalid_metadata_format")
        if metadata is not None:
            problem = _metadata_problem(metadata)
            if problem:
                return _refused(problem)
        channel = str(args["channel"])
        with self.store.transaction() as db:
            ts = _next_ts(db, channel)
            db.execute(
                "INSERT INTO messages (channel, ts, text, metadata, created) VALUES (?,?,?,?,?)",
                (channel, ts, text, json.dumps(metadata) if metadata else None, time.time()),
            )
            message = _message(ts, text, metadata)
            if self.events is not None:
                event_id = f"Ev{secrets.token_hex(5).upper()}"
                self.events.record(db, event_id, self._envelope(channel, message, event_id))
        if self.events is not None:
            self.events.dispatch()
        return Reply(200, {"ok": True, "channel": channel, "ts": ts, "message": message})

    def _envelope(self, channel: str, message: dict[str, Any], event_id: str) -> dict:
        """The Events API's `event_callback` announcing a posted message."""
        event = {
            **message,
            "channel": channel,
            "event_ts": message["ts"],
            "channel_type": "channel",
        }
        if "metadata" in event:
            event["metadata"] = self._shown(event["metadata"], everything=False)
        return {
            "token": "fake-verification-token",
            "team_id": TEAM,
            "api_app_id": APP,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(float(message["ts"])),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": TEAM,
                    "user_id": BOT_USER,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }

    def _shown(self, metadata: dict[str, Any], *, everything: bool) -> dict[str, Any]:
        """Metadata as Slack shows it to a reader: the payload only when asked for it
        (`include_all_metadata`) or when the app's manifest declares the event type."""
        if everything or metadata.get("event_type") in self.settings.declared:
            return metadata
        return {"event_type": metadata.get("event_type"), "event_payload": {}}

    # --- conversations.history --------------------------------------------------------------

    def history(self, args: dict[str, Any]) -> Reply:
        try:
            oldest = float(args.get("oldest") or 0)
            latest = float(args.get("latest") or time.time())
            limit = min(max(int(args.get("limit") or 100), 1), 999)
        except ValueError:
            return _refused("invalid_arguments")
        inclusive = str(args.get("inclusive", "")) in _TRUE
        everything = str(args.get("include_all_metadata", "")) in _TRUE
        before = latest
        cursor = args.get("cursor")
        if cursor:
            try:
                before = float(_cursor_ts(str(cursor)))
            except ValueError:
                return _refused("invalid_cursor")
        with self.store.reading() as db:
            rows = db.execute(
                "SELECT ts, text, metadata FROM messages WHERE channel = ?",
                (args["channel"],),
            ).fetchall()
        chosen = sorted(
            (
                row
                for row in rows
                if _inside(float(row["ts"]), oldest, latest, inclusive)
                and (not cursor or float(row["ts"]) < before)
            ),
            key=lambda row: float(row["ts"]),
            reverse=True,
        )
        page, more = chosen[:limit], len(chosen) > limit
        messages = [self._listed(row, everything) for row in page]
        answer: dict[str, Any] = {
            "ok": True,
            "messages": messages,
            "has_more": more,
            "pin_count": 0,
            "channel_actions_ts": None,
            "channel_actions_count": 0,
        }
        if more:
            answer["response_metadata"] = {"next_cursor": _cursor(page[-1]["ts"])}
        return Reply(200, answer)

    def _listed(self, row: Any, everything: bool) -> dict[str, Any]:
        metadata = json.loads(row["metadata"]) if row["metadata"] else None
        message = _message(row["ts"], row["text"], None)
        if metadata:
            message["metadata"] = self._shown(metadata, everything=everything)
        return message

    # --- the sandbox side -------------------------------------------------------------------

    def transactions(self) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute("SELECT * FROM messages ORDER BY seq").fetchall()
        return [
            {
                "object": "message",
                "channel": row["channel"],
                "ts": row["ts"],
                "text": row["text"],
                "metadata": json.loads(row["metadata"]) if row["metadata"] else None,
                "created": row["created"],
            }
            for row in rows
        ]

    def reset(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM messages")
            db.execute("DELETE FROM event_deliveries")
        with self._limit_lock:
            self._limit = RateLimit()
        self.interactive.reset()

    def inspect(self, request: Request) -> Reply | None:
        match request.method, request.path:
            case "POST", "/_sandbox/ratelimit":
                return self._set_rate_limit(request.json())
            case "GET", "/_sandbox/events":
                shown = self.events.deliveries() if self.events else []
                return Reply(200, {"object": "list", "data": shown})
            case "POST", "/_sandbox/url_verification":
                return self._verify_url()
        return self._interact(request)

    def _interact(self, request: Request) -> Reply | None:
        """The interactive side's own endpoints (`interactive`)."""
        if request.method == "GET" and request.path == "/_sandbox/interactive":
            return Reply(200, self.interactive.state())
        if request.method != "POST":
            return None
        if request.path == "/_sandbox/users":
            return self.interactive.add_user(request.json())
        if request.path == "/_sandbox/replay":
            return self.interactive.replay(request.json())
        acts = {
            "/_sandbox/press": self.interactive.press,
            "/_sandbox/submit": self.interactive.submit,
        }
        if request.path not in acts:
            return None
        if not self.settings.interactivity_url:
            raise HttpError(400, "invalid_request", "no --interactivity-url configured")
        return acts[request.path](request)

    def _set_rate_limit(self, body: dict[str, Any]) -> Reply:
        count, wait = body.get("count", 1), body.get("retry_after", 30)
        after = body.get("after", 0)
        methods = body.get("methods", ["chat.postMessage", "conversations.history"])
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (count, wait, after)):
            raise HttpError(400, "invalid_request", "count, retry_after and after are integers")
        if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
            raise HttpError(400, "invalid_request", "methods is a list of method names")
        with self._limit_lock:
            self._limit = RateLimit(count, wait, set(methods), after)
        return Reply(200, {"count": count, "retry_after": wait, "methods": methods, "after": after})

    def _verify_url(self) -> Reply:
        """Slack's check of a Request URL: a signed `url_verification`, answered with its
        challenge (as text, a form or JSON) for the URL to be taken."""
        if self.events is None:
            raise HttpError(400, "invalid_request", "no --events-url configured")
        challenge = secrets.token_urlsafe(24)
        body = json.dumps(
            {"token": "fake-verification-token", "challenge": challenge, "type": "url_verification"}
        ).encode()
        status, answer = self.events.post(body)
        return Reply(
            200,
            {"status": status, "answered": _challenge_of(answer) == challenge, "body": str(answer)},
        )

    def start(self) -> None:
        if self.events is not None:
            self.events.dispatch()

    def stop(self) -> None:
        if self.events is not None:
            self.events.stop()


def _arguments(request: Request) -> dict[str, Any]:
    """A method's arguments from the query string, a form body or a JSON body."""
    args: dict[str, Any] = dict(request.query)
    kind = (request.header("Content-Type") or "").split(";")[0].strip().lower()
    if kind == "application/json" and request.body:
        args |= request.json()
    elif request.body:
        form = parse_qs(request.body.decode(errors="replace"), keep_blank_values=True)
        args |= {name: values[-1] for name, values in form.items()}
    return args


def _metadata_problem(metadata: Any) -> str:
    if not isinstance(metadata, dict) or set(metadata) - {"event_type", "event_payload"}:
        return "invalid_metadata_format"
    kind, payload = metadata.get("event_type"), metadata.get("event_payload")
    if not isinstance(kind, str) or not _EVENT_TYPE.fullmatch(kind):
        return "invalid_metadata_schema"
    if not isinstance(payload, dict):
        return "invalid_metadata_format"
    if len(json.dumps(metadata)) > MAX_METADATA:
        return "metadata_too_large"
    return ""


def _next_ts(db: Any, channel: str) -> str:
    """A ts unique in the channel and later than every one before (Slack's are)."""
    last = db.execute(
        "SELECT ts FROM messages WHERE channel = ? ORDER BY seq DESC LIMIT 1", (channel,)
    ).fetchone()
    now = round(time.time(), 6)
    if last is not None and now <= float(last["ts"]):
        now = round(float(last["ts"]) + 0.000001, 6)
    return f"{now:.6f}"


def _message(ts: str, text: str, metadata: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "message",
        "user": BOT_USER,
        "bot_id": BOT,
        "app_id": APP,
        "text": text,
        "ts": ts,
        "team": TEAM,
        "bot_profile": {"id": BOT, "app_id": APP, "name": "effect-ledger", "team_id": TEAM},
    }
    if metadata:
        message["metadata"] = metadata
    return message


def _inside(ts: float, oldest: float, latest: float, inclusive: bool) -> bool:
    return oldest <= ts <= latest if inclusive else oldest < ts < latest


def _cursor(ts: str) -> str:
    return base64.b64encode(f"next_ts:{ts.replace('.', '')}".encode()).decode()


def _cursor_ts(cursor: str) -> str:
    decoded = base64.b64decode(cursor.encode(), validate=True).decode()
    digits = decoded.removeprefix("next_ts:")
    if not decoded.startswith("next_ts:") or not digits.isdigit() or len(digits) < 7:
        raise ValueError("not a cursor of this channel")
    return f"{digits[:-6]}.{digits[-6:]}"


def _challenge_of(answer: bytes) -> str:
    text = answer.decode(errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        form = parse_qs(text)
        return form["challenge"][-1] if "challenge" in form else text
    return data.get("challenge", "") if isinstance(data, dict) else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.providers.slack.fake", description=(__doc__ or "").split("\n")[0]
    )
    add_arguments(parser, payments=False)
    slack = parser.add_argument_group("slack")
    slack.add_argument(
        "--bot-token", help=f"the bot token it takes ($SLACK_FAKE_BOT_TOKEN, else {DEFAULT_TOKEN})"
    )
    slack.add_argument("--channels", default="C0LEDGER01", help="channel IDs that exist")
    slack.add_argument("--events-url", help="the Events API Request URL to announce posts to")
    slack.add_argument(
        "--signing-secret",
        help="the app's signing secret (default: $SLACK_FAKE_SIGNING_SECRET, else the slack"
        " entry of $LEDGER_WEBHOOK_SECRETS)",
    )
    slack.add_argument(
        "--declared-metadata", default="", help="metadata event types the manifest declares"
    )
    slack.add_argument("--interactivity-url", help="the app's interactivity Request URL")
    values = vars(parser.parse_args(argv))
    token = values["bot_token"] or os.environ.get("SLACK_FAKE_BOT_TOKEN") or DEFAULT_TOKEN
    secret = values["signing_secret"] or os.environ.get("SLACK_FAKE_SIGNING_SECRET") or ""
    secret = secret or _ledger_secret(os.environ.get("LEDGER_WEBHOOK_SECRETS", ""))
    if (values["events_url"] or values["interactivity_url"]) and not secret:
        parser.error("--events-url and --interactivity-url need --signing-secret")
    try:
        options = options_from(values, SlackFake)
    except ValueError as error:
        parser.error(str(error))
    settings = Settings(
        token=token,
        channels=tuple(c for c in values["channels"].split(",") if c),
        events_url=values["events_url"] or "",
        signing_secret=secret,
        declared=tuple(t for t in values["declared_metadata"].split(",") if t),
        interactivity_url=values["interactivity_url"] or "",
    )
    serve(SlackFake(options, settings))


def _ledger_secret(setting: str) -> str:
    for entry in setting.split(","):
        name, _, secret = entry.strip().partition(":")
        if name == "slack" and secret:
            return secret
    return ""


if __name__ == "__main__":
    main()
