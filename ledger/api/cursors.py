"""The opaque cursors of the agent API's listings (`GET /effects`, a run's journal): the page's
last sort key, as URL-safe base64 of a JSON list of strings. A cursor is read back only in the
shape it was issued in; anything else is 422 naming `cursor`, never a 500."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

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
