"""A Slack channel's history over a window, every page of it, through `slack_sdk`.

`conversations.history` with `oldest` and `latest` (both inclusive) and
`include_all_metadata=true` lists the channel's messages newest first, a page at a time,
following `response_metadata.next_cursor` while `has_more`. Only a window read to its last
page is a listing; anything short of that (an error, a rate limit, a page that is not the
shape Slack documents, a page that ignores the window, too many pages) raises `Unread`: a
lookup answers inconclusive, and a window listing, which takes the pages one at a time as it is
read (`pages`), breaks off.

The effect's identity is the message's metadata: `event_type` `EVENT_TYPE` and an
`event_payload` with the idempotency key (`ledger_key`) and the effect's id
(`ledger_effect`). A message's reference is its `ts` in Slack's permalink form (`ref`). The
SDK is imported where it is used: loading it costs a quarter of a second, and the registry
imports every adapter at startup.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slack_sdk import WebClient
    from slack_sdk.web import SlackResponse

EVENT_TYPE = "effect_ledger_effect"
# Messages per page (Slack allows up to 999 and advises no more than 200), and how many pages
# a reading may take before it gives up as incomplete.
PAGE = 200
MAX_PAGES = 100


class Unread(Exception):
    """The window could not be read to its end: why, and how long Slack asked us to wait."""

    def __init__(self, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


@dataclass(frozen=True)
class Ours:
    """A message carrying our metadata: its `ts`, the key and effect id it carries."""

    ts: str
    key: str
    effect: str
    message: dict[str, Any]


def ref(ts: str) -> str:
    """The provider reference of the message at `ts`: Slack's permalink form ("p" and the
    ts's digits, as in `…/archives/C0123456789/p1503435956000247`). A bare ts is sixteen
    digits, and one in ten of those is Luhn-valid: the ledger would store it as a card
    number's token."""
    return "p" + ts.replace(".", "")


def client(base_url: str, token: str, timeout: float) -> WebClient:
    """The SDK's client, without its retries: a read that failed is reported, not repeated
    behind our back (and a repeated post would be a second message)."""
    from slack_sdk import WebClient

    base = base_url if base_url.endswith("/") else f"{base_url}/"
    return WebClient(token=token, base_url=base, timeout=math.ceil(timeout), retry_handlers=[])


def read_window(web: WebClient, channel: str, oldest: Decimal, latest: Decimal) -> list[dict]:
    """Every message of `channel` whose ts is in [oldest, latest], or `Unread` (a lookup's
    reading: at most MAX_PAGES pages)."""
    return [message for page in pages(web, channel, oldest, latest, MAX_PAGES) for message in page]


def pages(
    web: WebClient, channel: str, oldest: Decimal, latest: Decimal, most: int
) -> Iterator[list[dict]]:
    """Each page of `channel`'s messages whose ts is in [oldest, latest], newest first, fetched
    when the one before it has been taken; `Unread` in place of a page that cannot be had, or
    of a page beyond the `most`th."""
    cursor = ""
    for _ in range(most):
        page, cursor = _page(web, channel, oldest, latest, cursor)
        yield page
        if not cursor:
            return
    raise Unread(f"the window holds more than {most} pages of {PAGE} messages")


def ours(message: dict[str, Any]) -> Ours | None:
    """The message's identity when it carries our metadata; None when it does not.
    `ValueError` for a message marked as ours whose payload cannot be read."""
    marked = message.get("metadata")
    if not isinstance(marked, dict) or marked.get("event_type") != EVENT_TYPE:
        return None
    payload = marked.get("event_payload")
    key = payload.get("ledger_key") if isinstance(payload, dict) else None
    if not isinstance(key, str) or not key:
        raise ValueError(f"message {message.get('ts')} is marked as ours but carries no key")
    effect = payload.get("ledger_effect") if isinstance(payload, dict) else ""
    return Ours(str(message["ts"]), key, effect if isinstance(effect, str) else "", message)


def timestamp(ts: Any) -> Decimal:
    """A Slack `ts` ("1503435956.000247") as an exact number; `ValueError` if it is not one."""
    if not isinstance(ts, str) or not ts:
        raise ValueError(f"ts {ts!r} is not a string")
    try:
        value = Decimal(ts)
    except InvalidOperation:
        raise ValueError(f"ts {ts!r} is not a number") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"ts {ts!r} is not a time")
    return value


def _page(
    web: WebClient, channel: str, oldest: Decimal, latest: Decimal, cursor: str
) -> tuple[list[dict], str]:
    """One page and the cursor of the next ("" after the last)."""
    from slack_sdk.errors import SlackApiError

    try:
        response = web.conversations_history(
            channel=channel,
            oldest=f"{oldest:.6f}",
            latest=f"{latest:.6f}",
            inclusive=True,
            include_all_metadata=True,
            limit=PAGE,
            cursor=cursor or None,
        )
    except SlackApiError as exc:
        raise Unread(refusal(exc.response), retry_after=retry_after(exc.response)) from None
    except Exception as exc:  # urllib's errors, timeouts, a body cut short
        raise Unread(f"Slack did not answer: {type(exc).__name__}") from None
    return _read(response.data, oldest, latest)


def _read(data: Any, oldest: Decimal, latest: Decimal) -> tuple[list[dict], str]:
    """A page as Slack documents it, every message inside the window, or `Unread`."""
    if not isinstance(data, dict) or data.get("ok") is not True:
        raise Unread("Slack's answer is not an ok history page")
    messages, more = data.get("messages"), data.get("has_more")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise Unread("Slack's history page has no list of messages")
    if not isinstance(more, bool):
        raise Unread("Slack's history page does not say whether there is more")
    try:
        stamps = [timestamp(message.get("ts")) for message in messages]
    except ValueError as exc:
        raise Unread(f"Slack's history page holds a message without a usable ts ({exc})") from None
    if any(not oldest <= stamp <= latest for stamp in stamps):
        raise Unread("Slack's history page holds messages outside the window asked for")
    if not more:
        return messages, ""
    meta = data.get("response_metadata")
    cursor = meta.get("next_cursor") if isinstance(meta, dict) else None
    if not isinstance(cursor, str) or not cursor:
        raise Unread("Slack's history page says there is more but gives no cursor")
    return messages, cursor


def refusal(response: SlackResponse) -> str:
    """What an answer that is not ok says: Slack's error code, or the HTTP status."""
    data = response.data if isinstance(response.data, dict) else {}
    error = data.get("error")
    if response.status_code == 200 and isinstance(error, str):
        return f"Slack answered {error}"[:300]
    return f"Slack answered HTTP {response.status_code}" + (
        f" ({error})" if isinstance(error, str) else ""
    )


def retry_after(response: SlackResponse) -> float | None:
    """A 429's Retry-After in seconds, when it is a number."""
    if response.status_code != 429:
        return None
    headers = {str(name).lower(): value for name, value in (response.headers or {}).items()}
    value = headers.get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        seconds = float(str(value))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
