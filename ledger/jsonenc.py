"""JSON that keeps numbers exact.

Request bodies are parsed with `Decimal` for non-integers, so `10.10` stays `10.10` all the way
into PostgreSQL and back out again. `dumps` writes JSON text itself because the standard
encoder can only write a Decimal as a string or a rounded float.

`loads` only ever says no with `MalformedJSON`: text nested deeper than `MAX_DEPTH` is refused
before the (recursive) decoder sees it, and a number literal too large to be worth converting
is never converted: it comes back as an `OversizedNumber`, so that the caller can name the
field that held it.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

_escape = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


# Deeper than this is refused before decoding: the standard decoder recurses once per level.
MAX_DEPTH = 64
# A number literal longer than this is never converted. No amount, count or identifier needs
# more (callers allow 100 digits at most), and int() of a long literal is quadratic.
MAX_NUMBER_CHARS = 120
# A string (possibly unterminated, so that the scan never backtracks) or a bracket.
_STRUCTURE = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]', re.DOTALL)


class MalformedJSON(ValueError):
    pass


class OversizedNumber:
    """Stands where a number literal was refused by its size, unconverted: `problem` says why.
    Never written back out (`dumps` refuses it); callers turn it into a refusal naming the field."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def __repr__(self) -> str:
        return f"OversizedNumber({self.problem!r})"


def _refuse_constant(name: str) -> Any:
    raise MalformedJSON(f"{name} is not valid JSON")


def _number_hook(convert: Any) -> Any:
    def parse(literal: str) -> Any:
        if len(literal) > MAX_NUMBER_CHARS:
            mantissa = re.split("[eE]", literal, maxsplit=1)[0]
            digits = len(mantissa) - mantissa.count("-") - mantissa.count(".")
            return OversizedNumber(
                "more than 100 digits" if digits > 100 else "number out of range"
            )
        try:
            return convert(literal)
        except (ArithmeticError, ValueError):
            # Decimal refuses exponents past its own limits (1e99999999999999999999).
            return OversizedNumber("number out of range")

    return parse


_PARSE_INT, _PARSE_FLOAT = _number_hook(int), _number_hook(Decimal)


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Does `text` open more than `limit` arrays and objects inside one another? A loop, not a
    recursion: the point is to refuse before anything recurses. Brackets inside strings do not
    count; the text need not be valid JSON."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _STRUCTURE.finditer(text):
        char = text[match.start()]
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parsed JSON, or `MalformedJSON` (whose message never quotes the text). Numbers too large
    to convert come back as `OversizedNumber`."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
        if too_deep(text, max_depth):
            raise MalformedJSON(f"nested deeper than {max_depth} levels")
        return json.loads(
            text,
            parse_float=_PARSE_FLOAT,
            parse_int=_PARSE_INT,
            parse_constant=_refuse_constant,
        )
    except MalformedJSON:
        raise
    except (ValueError, RecursionError) as exc:
        raise MalformedJSON(str(exc)[:200]) from None


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
