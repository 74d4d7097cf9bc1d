"""Arguments made canonical before anything is written: JSON values only, with nothing a
reader could take two ways.

A guarded function's bound arguments become the effect's request. The ledger compares a
repeated request with the recorded one by its canonical form (keys sorted, equal numbers
written alike, so `25` and `25.0` are one request), so what goes in must have exactly one JSON
form: strings, finite numbers, booleans, null, lists and string-keyed objects. Pydantic models
and dataclasses are dumped to their JSON form, enums to their values, `Decimal` and `UUID` and
dates to text. Anything else (an arbitrary object, NaN, infinity, a non-string key) raises
`TypeError` naming the argument and where in it, before the ledger is asked anything.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

JSON = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]


def canonical(value: Any, where: str) -> JSON:
    """`value` as plain JSON data; `where` names it in the error ("argument 'order'")."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return canonical(value.value, where)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: {value!r} has no JSON form (not a finite number)")
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError(f"{where}: {value!r} has no JSON form (not a finite number)")
        return str(value)
    if isinstance(value, (uuid.UUID, datetime.date, datetime.time)):
        return str(value) if isinstance(value, uuid.UUID) else value.isoformat()
    if isinstance(value, BaseModel):
        return canonical(value.model_dump(mode="json"), where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return canonical(dataclasses.asdict(value), where)
    if isinstance(value, Mapping):
        return _mapping(value, where)
    if isinstance(value, (list, tuple)):
        return [canonical(item, f"{where}[{n}]") for n, item in enumerate(value)]
    raise TypeError(
        f"{where}: a {type(value).__name__} has no canonical JSON form; pass JSON values, "
        "pydantic models or dataclasses"
    )


def _mapping(value: Mapping[Any, Any], where: str) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{where}: the key {key!r} is not a string")
        out[key] = canonical(item, f"{where}[{key!r}]")
    return out


def lenient(value: Any) -> JSON:
    """A provider's answer as JSON, for the outcome report: the call has happened, so a value
    without a canonical form is recorded as its text rather than lost."""
    try:
        return canonical(value, "the response")
    except TypeError:
        return {"repr": repr(value)[:2000]}
