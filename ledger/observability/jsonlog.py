"""JSON log lines: one object per line, for machines to collect and search.

    {"timestamp": "2025-01-31T12:00:00.123456+00:00", "level": "INFO", "logger": "ledger.requests",
     "message": "POST /api/v1/effects 201", "request_id": "…", "agent": "planner",
     "effect_id": "…", "run_id": "order-77", "status": 201, "duration_ms": 12.3}

The context fields come from `ledger.observability.logcontext.ContextFilter`; further fields from a
call's
`extra={…}` when they are plain values (a string, number, boolean or null). Objects that Django
attaches to records (the request, a socket) are never written: their text can hold cookies.

Defence in depth: whatever a caller passes, a line leaves here with agent keys cut to their
public prefix and card numbers replaced by redaction tokens. The test suite does not rely on
it: it scans what was logged before this scrubbing (tests/logscan.py).
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
from datetime import UTC, datetime
from typing import Any

from ledger.policy.redaction import scrub_cards

# Attributes every LogRecord has: not "extra" fields.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
# `elk_<12 hex prefix>_<secret>`: the prefix names the key (revokekey takes it), the rest is
# the secret.
_AGENT_KEY = re.compile(r"(elk_(?:[a-z]+_)?[0-9a-f]{12})_[A-Za-z0-9_-]{8,}")
# Ids and timestamps made of digit groups must not be mistaken for card numbers.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def scrub(text: str) -> str:
    """`text` without agent keys' secrets or card numbers; UUIDs are left whole."""
    text = _AGENT_KEY.sub(r"\1_…", text)
    pieces = _UUID.split(text)
    if len(pieces) == 1:
        return scrub_cards(text)
    ids = _UUID.findall(text)
    out = [scrub_cards(pieces[0])]
    for uid, piece in zip(ids, pieces[1:], strict=True):
        out += [uid, scrub_cards(piece)]
    return "".join(out)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


class JsonFormatter(logging.Formatter):
    """`scrubbed=False` only for the test suite's capture, which must see what was passed."""

    def __init__(self, *args: Any, scrubbed: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scrubbed = scrubbed

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in _STANDARD and name not in entry and _plain(value) and value != "":
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        if self.scrubbed:
            entry = {
                name: scrub(value) if isinstance(value, str) else value
                for name, value in entry.items()
            }
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(config: dict[str, Any]) -> None:
    """Django's LOGGING_CONFIG: the dictionary applied, and Python's warnings routed through
    logging (logger `py.warnings`), so that a library's warning is a JSON line like the rest
    instead of bare text on stderr."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)
