"""Fault knobs: the ways a real provider misbehaves, switched on per process or per request.

They come from three places that all use the same names: command-line flags at start
(`--drop`, `--latency 300`), `POST /_sandbox/faults` at runtime (`{"drop": true}`), and the
`X-Sandbox-Fault` request header (`latency=300,drop`). The header adds to the process-wide
set for one request.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

METHODS = ("GET", "POST")


class FaultError(ValueError):
    """A fault specification that cannot be understood; answered with 400."""


@dataclass(frozen=True)
class Faults:
    latency: int = 0  # milliseconds to sleep before handling
    hang: float = 0.0  # seconds to sleep before handling: past the client's timeout
    drop: bool = False  # commit, then close the connection without a response
    fail5xx: int = 0  # respond with this 5xx status before doing anything
    ignore_keys: bool = False  # payments: behave like a provider without idempotency keys
    # payments: keep the key as a searchable reference, but never deduplicate by it
    reference_only: bool = False
    garbage: bool = False  # answer 200 with a body that is not JSON
    wrong_types: bool = False  # answer 200 with JSON whose fields have the wrong types
    drop_rate: float = 0.0  # fraction of POSTs that get `drop`
    fail5xx_rate: float = 0.0  # fraction of POSTs that get `fail5xx` (503)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


_FLAGS = {"drop", "ignore_keys", "reference_only", "garbage", "wrong_types"}


def _number(name: str, value: Any, *, low: float = 0.0, high: float | None = None) -> float:
    if isinstance(value, bool):
        raise FaultError(f"Fault {name!r} needs a number, not a boolean.")
    try:
        exact = Decimal(str(value))
    except (InvalidOperation, ValueError):
        exact = Decimal("NaN")
    if not exact.is_finite():
        raise FaultError(f"Fault {name!r} needs a number, got {value!r}.")
    number = float(exact)
    if number < low or (high is not None and number > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise FaultError(f"Fault {name!r} must be {bound}, got {value!r}.")
    return number


def _flag(name: str, value: Any) -> bool:
    # A bare `drop` in the header arrives as "", a JSON `"drop": true` as True.
    if value in (True, "", None, "1", "true"):
        return True
    if value in (False, "0", "false"):
        return False
    raise FaultError(f"Fault {name!r} is on or off, got {value!r}.")


def _status(value: Any) -> int:
    # `fail5xx` alone (or `true`) means 503, the status of an overloaded provider.
    if value is True or value == "" or value is None:
        return 503
    if value is False or value == 0 or value == "0":
        return 0
    return int(_number("fail5xx", value, low=500, high=599))


def parse(items: Mapping[str, Any]) -> Faults:
    """Faults from name → value pairs; hyphens and underscores are interchangeable."""
    values: dict[str, Any] = {}
    for raw_name, value in items.items():
        name = raw_name.strip().replace("-", "_")
        if name in _FLAGS:
            values[name] = _flag(name, value)
        elif name == "fail5xx":
            values[name] = _status(value)
        elif name == "latency":
            values[name] = int(_number(name, value))
        elif name == "hang":
            values[name] = _number(name, value)
        elif name in ("drop_rate", "fail5xx_rate"):
            values[name] = _number(name, value, high=1.0)
        else:
            raise FaultError(f"Unknown fault {raw_name!r}.")
    return Faults(**values)


def parse_header(header: str) -> Faults:
    """`latency=300,drop` → Faults(latency=300, drop=True)."""
    items: dict[str, Any] = {}
    for token in header.split(","):
        name, _, value = token.strip().partition("=")
        if name:
            items[name] = value.strip()
    return parse(items)


def combine(base: Faults, extra: Faults) -> Faults:
    """The process-wide faults plus one request's: flags add up, numbers from `extra` win."""
    return Faults(
        latency=extra.latency or base.latency,
        hang=extra.hang or base.hang,
        drop=base.drop or extra.drop,
        fail5xx=extra.fail5xx or base.fail5xx,
        ignore_keys=base.ignore_keys or extra.ignore_keys,
        reference_only=base.reference_only or extra.reference_only,
        garbage=base.garbage or extra.garbage,
        wrong_types=base.wrong_types or extra.wrong_types,
        drop_rate=extra.drop_rate or base.drop_rate,
        fail5xx_rate=extra.fail5xx_rate or base.fail5xx_rate,
    )


class FaultSwitch:
    """The process-wide faults, changeable at runtime from any request thread.

    `methods` limits the process-wide faults to some request methods, so a crash test can
    drop every charge response (POST) while its lookups (GET) still get through. The random
    rates apply to POSTs only: they model lost or refused *effects*.
    """

    def __init__(self, startup: Faults, seed: int | None) -> None:
        self._lock = threading.Lock()
        self._startup = (startup, frozenset(METHODS))
        self._current = self._startup
        self._seed = seed
        self._dice = random.Random(seed)

    def set(self, faults: Faults, methods: Iterable[str] = METHODS) -> None:
        with self._lock:
            self._current = (faults, frozenset(methods))

    def restore(self) -> None:
        """Back to the faults given at start, with the dice rewound to the same seed."""
        with self._lock:
            self._current = self._startup
            self._dice = random.Random(self._seed)

    def reseed(self, seed: int) -> None:
        with self._lock:
            self._seed = seed
            self._dice = random.Random(seed)

    def describe(self) -> dict[str, Any]:
        with self._lock:
            faults, methods = self._current
        return {**faults.as_json(), "methods": sorted(methods)}

    def for_request(self, method: str, header: str | None) -> Faults:
        with self._lock:
            base, methods = self._current
            if method not in methods:
                base = Faults()
            faults = combine(base, parse_header(header)) if header else base
            # Roll the dice under the lock so a seed gives one reproducible sequence of
            # outcomes however the request threads interleave.
            if method == "POST" and faults.drop_rate and self._dice.random() < faults.drop_rate:
                faults = replace(faults, drop=True)
            if (
                method == "POST"
                and faults.fail5xx_rate
                and self._dice.random() < faults.fail5xx_rate
            ):
                faults = replace(faults, fail5xx=faults.fail5xx or 503)
        return faults


# What a proxy or a half-deployed provider sends back: HTML under a JSON content type.
GARBAGE = b"<html><body><h1>200 OK</h1><p>upstream said: \x00\xff{not json</p></body></html>"


def mistyped(payload: Any, key: str = "") -> Any:
    """The same document with every leaf of the wrong type (`"amount": true`, `"id": 5`)."""
    if isinstance(payload, dict):
        return {name: mistyped(value, name) for name, value in payload.items()}
    if isinstance(payload, list):
        return [mistyped(item, key) for item in payload]
    if isinstance(payload, str):
        return True if key == "amount" else len(payload)
    if isinstance(payload, bool):
        return "yes" if payload else "no"
    if isinstance(payload, int | float):
        return str(payload)
    return False
