"""SendGrid's Email Activity API, asked through the official `sendgrid` library.

Two calls: the messages whose custom argument `ledger_key` is ours
(`GET /v3/messages?query=unique_args['ledger_key']="…"&limit=…`; SendGrid's query language
names the V3 `custom_args` `unique_args`), and one message's details (`GET /v3/messages/{msg_id}`:
its `unique_args` and its `events`), which is what shows that a listed message really carries
our key (the list itself does not echo it).

Anything short of a 200 with the documented JSON shape is `AskLater`: a 429 with SendGrid's
`X-RateLimit-Reset` (a Unix time) says when to ask again; the Email Activity API allows six
requests a minute per account.
"""

from __future__ import annotations

import ast
import http.client
import json
import time
from typing import Any
from urllib.parse import quote

# At most this many messages per search: a search that fills the page may have left some
# out (the API has no further pages), so it proves nothing.
SEARCH_LIMIT = 10
# A reset further away than this is not believed (a clock far off, or garbage).
LONGEST_WAIT = 3600.0
STATUSES = ("processed", "delivered", "not_delivered")


class AskLater(Exception):
    """No usable answer: `detail` says why, `retry_after` when SendGrid said when to ask again."""

    def __init__(self, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.detail, self.retry_after = detail, retry_after


def query_for(key: str) -> str:
    """The activity query for messages carrying our key (quotes and backslashes escaped)."""
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f"unique_args['ledger_key']=\"{escaped}\""


class Activity:
    """The Email Activity API of one account, through the SDK's client."""

    def __init__(self, api_key: str, base_url: str, timeout: float) -> None:
        from sendgrid import SendGridAPIClient  # 80 ms to import: only where it is used

        self.client = SendGridAPIClient(api_key=api_key, host=base_url).client
        self.timeout = timeout

    def search(self, key: str) -> list[dict[str, Any]]:
        """The abbreviated messages the activity lists under our key."""
        body = self._get(
            self.client.messages,
            {"query": query_for(key), "limit": SEARCH_LIMIT},
        )
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(_abbreviated(m) for m in messages):
            raise AskLater("the activity answer has no list of messages in SendGrid's shape")
        if len(messages) >= SEARCH_LIMIT:
            raise AskLater(f"the activity listed {len(messages)} messages: the page may be cut")
        return messages

    def message(self, msg_id: str) -> dict[str, Any]:
        """One message's details: its status, custom arguments and events."""
        body = self._get(self.client.messages._(quote(msg_id, safe="")), None)
        if body.get("msg_id") != msg_id or body.get("status") not in STATUSES:
            raise AskLater("the message's details are not in SendGrid's shape")
        events = body.get("events", [])
        if not isinstance(events, list) or not all(
            isinstance(e, dict) and isinstance(e.get("event_name"), str) for e in events
        ):
            raise AskLater("the message's events are not a list of named events")
        return body

    def _get(self, endpoint: Any, params: dict[str, Any] | None) -> dict[str, Any]:
        from python_http_client.exceptions import HTTPError

        try:
            response = endpoint.get(query_params=params, timeout=self.timeout)
        except HTTPError as error:
            raise _refusal(error) from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            # Timeouts, refused or dropped connections, a body cut short.
            raise AskLater(f"SendGrid unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise AskLater(f"SendGrid answered {response.status_code}")
        try:
            body = json.loads(response.body)
        except (ValueError, TypeError):
            raise AskLater("SendGrid answered something that is not JSON") from None
        if not isinstance(body, dict):
            raise AskLater("SendGrid's answer is not a JSON object")
        return body


def _abbreviated(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("msg_id"), str)
        and bool(message["msg_id"])
        and message.get("status") in STATUSES
    )


def _refusal(error: Any) -> AskLater:
    """An error status as ask-later: a 429 with when to ask again, anything else with its status."""
    status = getattr(error, "status_code", 0)
    headers = getattr(error, "headers", None)
    if status == 429:
        return AskLater("SendGrid answered 429 (rate limit)", _reset_in(headers))
    return AskLater(f"SendGrid answered {status}")


def _reset_in(headers: Any) -> float | None:
    """Seconds until SendGrid's `X-RateLimit-Reset` (a Unix time), or a `Retry-After`."""
    if headers is None:
        return None
    for name, absolute in (("X-RateLimit-Reset", True), ("Retry-After", False)):
        raw = str(headers.get(name) or "").strip()
        if raw.isdecimal() and len(raw) <= 12:
            wait = int(raw) - time.time() if absolute else float(raw)
            return min(max(wait, 0.0), LONGEST_WAIT)
    return None


def custom_args(details: dict[str, Any]) -> dict[str, Any] | None:
    """A message's custom arguments: the API documents them as a JSON string (its example is
    written with Python's quotes); an object is taken as it is. None when unreadable."""
    raw = details.get("unique_args")
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or len(raw) > 20_000:  # SendGrid keeps at most 10,000 bytes
        return None
    for read in (json.loads, ast.literal_eval):
        try:
            value = read(raw)
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            continue
        return value if isinstance(value, dict) else None
    return None
