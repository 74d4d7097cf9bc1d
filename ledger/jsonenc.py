"""JSON that keeps numbers exact.

Request bodies are parsed with `Decimal` for non-integers, so `10.10` stays `10.10` all the way
into PostgreSQL and back out again. `dumps` writes JSON text itself because the standard
encoder can only write a Decimal as a string or a rounded float.
"""

from __future__ import annotations

import json
import math
import unicodedata
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

_escape = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


class MalformedJSON(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise MalformedJSON(f"{name} is not valid JSON")


def loads(text: str | bytes) -> Any:
    try:
        return json.loads(text, parse_float=Decimal, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise MalformedJSON(str(exc)) from None


def _number(value: int | float | Decimal) -> str:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} cannot be written as JSON")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} cannot be written as JSON")
        return repr(value)
    return str(value)


def dumps(value: Any, *, canonical: bool = False) -> str:
    """JSON text. `canonical` sorts keys, NFC-normalises strings and writes equal numbers alike
    (`10.10` and `10.1`, `1` and `1.0`): the form request hashes are taken over."""
    parts: list[str] = []
    _write(value, parts, canonical)
    return "".join(parts)


def _canonical_number(value: int | float | Decimal) -> str:
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    if not number.is_finite():
        raise ValueError(f"{value} cannot be written as JSON")
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


def _write(value: Any, out: list[str], canonical: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_escape(unicodedata.normalize("NFC", value) if canonical else value))
    elif isinstance(value, (int, float, Decimal)):
        out.append(_canonical_number(value) if canonical else _number(value))
    elif isinstance(value, dict):
        items = value.items()
        if canonical:
            items = sorted(
                ((unicodedata.normalize("NFC", str(k)), v) for k, v in items),
                key=lambda kv: kv[0],
            )
        out.append("{")
        for index, (key, item) in enumerate(items):
            if index:
                out.append(",")
            out.append(_escape(str(key)))
            out.append(":")
            _write(item, out, canonical)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out, canonical)
        out.append("]")
    elif isinstance(value, datetime):
        out.append(_escape(value.isoformat().replace("+00:00", "Z")))
    elif isinstance(value, UUID):
        out.append(f'"{value}"')
    else:
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class ExactJSONEncoder(json.JSONEncoder):
    """For `JSONField(encoder=...)`: Django calls `json.dumps(value, cls=...)`."""

    def encode(self, o: Any) -> str:
        return dumps(o)


class ExactJSONDecoder(json.JSONDecoder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["parse_float"] = Decimal
        super().__init__(*args, **kwargs)
