"""The cursors of the agent API's listings (`GET /effects`, a run's journal, `POST /recovery`):
the page's last sort key, written out in a form the served schema declares as a `pattern`
(docs/api.md). Every string the pattern admits names a position, so a request the schema
allows is never refused for its cursor; a position past the end is an empty page. A string
the pattern refuses is 422 naming `cursor`, never a 500.

- effect list: `<created_at, microseconds since 1970 UTC>.<id, 32 hex digits>`
- journal: `<seq>`
- recovery: `<urgency>.<created_at, microseconds since 1970 UTC>.<id, 32 hex digits>`
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

from ledger.effects.recovery import IN_HAND, Position
from ledger.errors import ValidationFailed

_STAMP, _ID = r"[0-9]{1,18}", r"[0-9a-f]{32}"
LIST_CURSOR = rf"^{_STAMP}\.{_ID}$"
JOURNAL_CURSOR = rf"^{_STAMP}$"
RECOVERY_CURSOR = rf"^[0-{IN_HAND}]\.{_STAMP}\.{_ID}$"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# The last instant Python can hold; a cursor beyond it stands for it (nothing comes after).
_LAST = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND


def _stamp(moment: datetime) -> str:
    return str((moment - _EPOCH) // _MICROSECOND)


def _moment(stamp: str) -> datetime:
    return _EPOCH + _MICROSECOND * min(int(stamp), _LAST)


def _parts(cursor: str, pattern: str) -> list[str]:
    if not re.fullmatch(pattern.strip("^$"), cursor):
        raise ValidationFailed(
            "The cursor is not valid.", {"cursor": "not a cursor this API issued"}
        )
    return cursor.split(".")


def list_cursor(created_at: datetime, effect_id: uuid.UUID) -> str:
    return f"{_stamp(created_at)}.{uuid.UUID(str(effect_id)).hex}"


def list_position(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Where the `GET /effects` page a cursor names ends, or 422 naming `cursor`."""
    stamp, last_id = _parts(cursor, LIST_CURSOR)
    return _moment(stamp), uuid.UUID(hex=last_id)


def journal_cursor(seq: int) -> str:
    return str(seq)


def journal_position(cursor: str) -> int:
    """The last `seq` of the journal page a cursor names, or 422 naming `cursor`."""
    (seq,) = _parts(cursor, JOURNAL_CURSOR)
    return int(seq)


def recovery_cursor(position: Position | None) -> str | None:
    """The cursor of `/recovery`'s next page, or None after the last."""
    if position is None:
        return None
    return f"{position.urgency}.{list_cursor(position.created_at, position.id)}"


def recovery_position(cursor: str) -> Position:
    """Where the `/recovery` page a cursor names ends, or 422 naming `cursor`."""
    urgency, stamp, last_id = _parts(cursor, RECOVERY_CURSOR)
    return Position(int(urgency), _moment(stamp), uuid.UUID(hex=last_id))
