"""Reading settings from the environment, failing loudly on values that make no sense."""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)?\s*$")
_UNIT_SECONDS = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            raise ImproperlyConfigured(f"The environment variable {name} must be set.")
        return default
    return value


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}.") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, got {value}.")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}.")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_duration(raw: str | int) -> int:
    """Seconds from `90`, `"90s"`, `"15m"`, `"24h"` or `"7d"`."""
    if isinstance(raw, bool):
        raise ValueError(f"not a duration: {raw!r}")
    if isinstance(raw, int):
        if raw < 0:
            raise ValueError(f"a duration cannot be negative: {raw}")
        return raw
    match = _DURATION.match(str(raw))
    if not match:
        raise ValueError(f"not a duration (use 30s, 15m, 24h or 7d): {raw!r}")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def env_duration(name: str, default: str) -> int:
    raw = os.environ.get(name) or default
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def env_keyring(name: str) -> dict[int, bytes]:
    """Versioned secrets, `"1:first-secret,2:second-secret"`; the highest version is current."""
    raw = env_str(name)
    ring: dict[int, bytes] = {}
    for part in raw.split(","):
        version, sep, secret = part.strip().partition(":")
        if not sep or not version.isdigit() or len(secret) < 16:
            raise ImproperlyConfigured(
                f"{name} must look like '1:<secret of 16+ characters>[,2:<secret>]'."
            )
        ring[int(version)] = secret.encode()
    return ring
