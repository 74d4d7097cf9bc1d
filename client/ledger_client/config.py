"""Where guarded calls find the ledger: `configure(...)` once per process, or the environment
(`EFFECT_LEDGER_URL`, `EFFECT_LEDGER_API_KEY`, `EFFECT_LEDGER_OWNER`,
`EFFECT_LEDGER_LEASE_SECONDS`), or a client given to
each guard. A `LedgerConfig` makes one sync client per process and one async client per event
loop (an `httpx.AsyncClient` belongs to the loop it was first used on)."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from ledger_client.aio import AsyncLedger
from ledger_client.errors import LedgerNotConfigured
from ledger_client.holders import process_owner
from ledger_client.sync import Ledger


@dataclass
class LedgerConfig:
    base_url: str
    api_key: str
    owner: str = ""
    lease_seconds: int = 30
    timeout: float = 10.0
    retries: int = 3
    _sync: Ledger | None = field(default=None, init=False, repr=False)
    _async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncLedger] = field(
        default_factory=weakref.WeakKeyDictionary, init=False, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _options(self) -> dict[str, Any]:
        owner = self.owner or process_owner()
        return {
            "owner": owner,
            "lease_seconds": self.lease_seconds,
            "timeout": self.timeout,
            "retries": self.retries,
        }

    def sync(self) -> Ledger:
        with self._lock:
            if self._sync is None:
                self._sync = Ledger(self.base_url, self.api_key, **self._options())
            return self._sync

    def for_loop(self) -> AsyncLedger:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = AsyncLedger(self.base_url, self.api_key, **self._options())
                self._async[loop] = client
            return client


_default: LedgerConfig | None = None


def configure(
    base_url: str,
    api_key: str,
    *,
    owner: str = "",
    lease_seconds: int = 30,
    timeout: float = 10.0,
    retries: int = 3,
) -> LedgerConfig:
    """Set the ledger guarded calls use when their guard names none."""
    global _default
    _default = LedgerConfig(base_url, api_key, owner, lease_seconds, timeout, retries)
    return _default


def default_config() -> LedgerConfig:
    """The configured ledger, else the environment's; `LedgerNotConfigured` (a
    `LedgerClientError` and a `RuntimeError`) when neither says."""
    global _default
    if _default is None:
        url, key = os.environ.get("EFFECT_LEDGER_URL"), os.environ.get("EFFECT_LEDGER_API_KEY")
        if not url or not key:
            raise LedgerNotConfigured(
                "No ledger configured: call ledger_client.configure(url, api_key) or set "
                "EFFECT_LEDGER_URL and EFFECT_LEDGER_API_KEY."
            )
        owner = os.environ.get("EFFECT_LEDGER_OWNER", "")
        _default = LedgerConfig(url, key, owner, _lease_seconds())
    return _default


def _lease_seconds() -> int:
    """`EFFECT_LEDGER_LEASE_SECONDS`, else 30: how long a crashed worker's claim holds an effect
    before a resumed run may settle it (the heartbeat keeps a live worker's lease running)."""
    text = os.environ.get("EFFECT_LEDGER_LEASE_SECONDS", "").strip()
    if not text:
        return 30
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= 86400:
        raise ValueError(f"EFFECT_LEDGER_LEASE_SECONDS must be 1 to 86400 seconds, not {text!r}")
    return seconds
