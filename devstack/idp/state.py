"""What the control endpoint set: claims per username and the fault mode (one process)."""

from __future__ import annotations

import threading
from typing import Any

FAULTS = ("", "tampered", "expired", "audience")
_lock = threading.Lock()
_claims: dict[str, dict[str, Any]] = {}
_fault = [""]


def claims_of(username: str) -> dict[str, Any]:
    with _lock:
        return dict(_claims.get(username, {}))


def set_claims(username: str, claims: dict[str, Any]) -> None:
    with _lock:
        _claims[username] = dict(claims)


def fault() -> str:
    with _lock:
        return _fault[0]


def set_fault(mode: str) -> None:
    if mode not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS}")
    with _lock:
        _fault[0] = mode
