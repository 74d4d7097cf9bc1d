"""The opaque cursors of the agent API's listings (`GET /effects`, a run's journal,
`POST /recovery`): the page's
last sort key, as URL-safe base64 of a JSON list of strings. A cursor is read back only in the
shape it was issued in; anything else is 422 naming `cursor`, never a 500."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from typing import Any

from ledger.effects.recovery import IN_HAND, Position
from ledger.errors import ValidationFailed


def encode_cursor(*parts: Any) -> str:
    raw = json.dumps([p.isoformat() if isinstance(p, datetime) else str(p) for p in parts])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, size: int) -> list[str]:
    """The `size` strings of a cursor this API issued, or 422."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (binascii.Error, ValueError):
        parts = None
    if (
        not isinstance(parts, list)
        or len(parts) != size
        or not all(isinstance(p, str) for p in parts)
    ):
        raise ValidationFailed(
            "The cursor is not valid.", {"cursor": "not a cursor this API issued"}
        )
    return parts


def recovery_cursor(position: Position | None) -> str | None:
    """The cursor of `/recovery`'s next page, or None after the last."""
    if position is None:
        return None
    return encode_cursor(position.urgency, position.created_at, position.id)


def recovery_position(cursor: str) -> Position:
    """Where the `/recovery` page a cursor names ends, or 422 naming `cursor`."""
    urgency, created, last_id = decode_cursor(cursor, 3)
    try:
        position = Position(int(urgency), datetime.fromisoformat(created), uuid.UUID(last_id))
    except ValueError:
        position = None
    if (
        position is None
        or not 0 <= position.urgency <= IN_HAND
        or position.created_at.tzinfo is None
    ):
        raise ValidationFailed(
            "The cursor is not valid.", {"cursor": "not a cursor this API issued"}
        )
    return position
