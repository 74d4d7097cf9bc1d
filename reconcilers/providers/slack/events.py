"""Slack's Events API at the callback door (`POST /api/v1/callbacks/slack`).

Every request is checked with Slack's request signing (`signing`). The Request URL's
`url_verification` is answered with its challenge (`handshake`: a reply of the scheme's own,
nothing recorded). An `event_callback` whose event is a `message` carrying our metadata
settles the effect whose key it carries as confirmed, with the message's `ts` as the
provider's reference (`history.ref`); Slack sends a message event only for a message that
was posted.

Slack strips a message's `event_payload` from events unless the app's manifest declares the
metadata's event type (`history.EVENT_TYPE`): such a message names no key and is ignored,
with a warning saying so. Edits, deletions and other events settle nothing.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from reconcilers.providers.callbacks import CallbackRefused, CallbackRequest, Settlement
from reconcilers.providers.slack import history, signing

log = logging.getLogger(__name__)
# Message events of a message being posted; the others (message_changed, message_deleted,
# channel_join, …) speak of something else.
_POSTED = (None, "bot_message")


class SlackEvents:
    name = "slack"

    def verify(self, request: CallbackRequest) -> str:
        try:
            return signing.verify(request.headers, request.body, request.secrets)
        except signing.SignatureRefused as exc:
            raise CallbackRefused(str(exc)) from None

    def handshake(self, request: CallbackRequest) -> dict[str, str] | None:
        """The answer to Slack's check of the Request URL (a verified `url_verification`)."""
        try:
            body = json.loads(request.body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(body, dict) or body.get("type") != "url_verification":
            return None
        challenge = body.get("challenge")
        return {"challenge": challenge} if isinstance(challenge, str) else None

    def settlements(self, body: bytes) -> list[Settlement]:
        try:
            data = json.loads(body)
        except RecursionError:
            raise ValueError("the body nests too deeply") from None
        if not isinstance(data, dict):
            raise ValueError("the body is not a JSON object")
        if data.get("type") != "event_callback":
            return []
        event = data.get("event")
        if not isinstance(event, dict):
            raise ValueError("an event_callback without an event object")
        if event.get("type") != "message" or event.get("subtype") not in _POSTED:
            return []
        return _settlement(event, data.get("event_id"))


def _settlement(event: dict[str, Any], event_id: Any) -> list[Settlement]:
    ts = event.get("ts")
    try:
        history.timestamp(ts)
    except ValueError:
        return []
    try:
        mine = history.ours(event)
    except ValueError as exc:
        log.warning(
            "slack message event %s is marked with our metadata but has no payload (%s): "
            "declare the %s metadata event in the app's manifest",
            event_id,
            exc,
            history.EVENT_TYPE,
        )
        return []
    if mine is None:
        return []
    ref = history.ref(str(ts))
    record = {"channel": event.get("channel"), "ref": ref, "event_id": event_id}
    return [Settlement(mine.key, "confirmed", provider_ref=ref, response=record)]
