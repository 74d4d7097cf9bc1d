"""Checks on parsed JSON that no schema can express: what PostgreSQL cannot store, and sizes."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ledger.errors import ValidationFailed

MAX_DEPTH = 32
# Exponents beyond this are refused: canonicalising 1e999999 would build a million-digit string.
MAX_EXPONENT = 100
# Digits beyond this are refused: no amount needs them, and PostgreSQL's numeric (inside jsonb)
# overflows at 16,384 digits after the point.
MAX_DIGITS = 100


def _problem_with_string(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired surrogate"
    return None


def check_json(value: Any, path: str = "", depth: int = 0) -> None:
    """Raise `ValidationFailed` naming the first value PostgreSQL could not store."""
    if depth > MAX_DEPTH:
        raise ValidationFailed(
            "The body is nested too deeply.", {path or "body": f"deeper than {MAX_DEPTH}"}
        )
    if isinstance(value, str):
        problem = _problem_with_string(value)
        if problem:
            raise ValidationFailed(f"A string {problem}.", {path or "body": problem})
    elif isinstance(value, Decimal):
        if not value.is_finite() or abs(value.adjusted()) > MAX_EXPONENT:
            raise ValidationFailed(
                "A number is out of range.", {path or "body": "number out of range"}
            )
        if len(value.as_tuple().digits) > MAX_DIGITS:
            raise ValidationFailed(
                "A number has too many digits.",
                {path or "body": f"more than {MAX_DIGITS} digits"},
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            problem = _problem_with_string(key)
            if problem:
                raise ValidationFailed(f"A key {problem}.", {path or "body": f"key {problem}"})
            check_json(item, f"{path}.{key}" if path else str(key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, f"{path}.{index}" if path else str(index), depth + 1)
