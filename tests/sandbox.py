"""Sandbox providers as real subprocesses, for tests: start, inspect, fault, kill, restart.

    pytest_plugins = ["tests.sandbox"]  # in a conftest.py, or in the test module

    def test_it_charges_once(payments_provider):
        payments_provider.http.post("/charges", json={...}, headers={"Idempotency-Key": k})
        assert len(payments_provider.transactions()) == 1

Each provider runs as `python -m devstack.sandbox.<name>` on a free port with its own
SQLite store in the test's temporary directory; startup takes about a quarter of a second,
so the fixtures are per test and no state leaks between tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import httpx
import pytest

from devstack.sandbox.launch import SandboxProcess


class SandboxProvider(SandboxProcess):
    """A running sandbox provider process and the test endpoints to inspect and steer it."""

    def __init__(self, name: str, store: Path, log: Path, args: tuple[str, ...] = ()) -> None:
        super().__init__(name, store, log, args)
        self._http: httpx.Client | None = None

    def start(self) -> Self:
        super().start()
        health = self._sandbox("GET", "health")
        assert health["status"] == "ok", health
        return self

    # --- Inspection and faults ---------------------------------------------------------------

    @property
    def http(self) -> httpx.Client:
        """An HTTP client for this provider (base URL set, no proxies from the environment).

        One client per provider: building one costs ~25 ms (its TLS context), and its pool
        reconnects by itself after a `drop` or a restart.
        """
        if self._http is None:
            self._http = httpx.Client(base_url=self.url, timeout=5, trust_env=False)
        return self._http

    def close(self) -> None:
        """End the process and close the client; for fixtures, whose stores are thrown away
        (so SIGKILL: a clean shutdown would only make every test slower)."""
        self.kill()
        if self._http is not None:
            self._http.close()
            self._http = None

    def _sandbox(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, f"/_sandbox/{path}", json=body)
        response.raise_for_status()
        return response.json()

    def transactions(self) -> list[dict[str, Any]]:
        """Everything the provider did, in creation order (charges, refunds or messages)."""
        return self._sandbox("GET", "transactions")["data"]

    def webhooks(self) -> list[dict[str, Any]]:
        """Payments only: every webhook delivery with its attempts and outcome."""
        return self._sandbox("GET", "webhooks")["data"]

    def set_faults(self, methods: tuple[str, ...] = ("GET", "POST"), **faults: Any) -> dict:
        """Replace the process-wide faults: `set_faults(drop=True, methods=("POST",))`."""
        return self._sandbox("POST", "faults", {**faults, "methods": list(methods)})

    def clear_faults(self) -> dict:
        return self._sandbox("POST", "faults", {})

    def reset(self) -> None:
        """Empty the store and go back to the faults given at start."""
        self._sandbox("POST", "reset")

    def wait_for(self, condition: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Poll until `condition()` is truthy (the provider working in its own time: a hang,
        an async confirmation, a webhook retry); returns the last result."""
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


StartSandbox = Callable[..., SandboxProvider]
_numbers = itertools.count(1)


class Launcher:
    """Starts providers into one temporary directory and stops them all at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[SandboxProvider] = []

    def start(self, name: str, *args: str) -> SandboxProvider:
        stem = f"{name}-{next(_numbers)}"
        store, log = self.directory / f"{stem}.sqlite3", self.directory / f"{stem}.log"
        provider = SandboxProvider(name, store, log, args)
        self.started.append(provider)
        return provider.start()

    def stop_all(self) -> None:
        for provider in self.started:
            provider.close()


# Each fixture needs only pytest's own `tmp_path`, so importing one fixture by name into a
# test module is enough.
@pytest.fixture
def start_sandbox(tmp_path: Path) -> Iterator[StartSandbox]:
    """`start_sandbox("payments", "--async-mode", ...)`: a provider with start-up flags."""
    launcher = Launcher(tmp_path)
    yield launcher.start
    launcher.stop_all()


@pytest.fixture
def payments_provider(tmp_path: Path) -> Iterator[SandboxProvider]:
    launcher = Launcher(tmp_path)
    yield launcher.start("payments")
    launcher.stop_all()


@pytest.fixture
def messaging_provider(tmp_path: Path) -> Iterator[SandboxProvider]:
    launcher = Launcher(tmp_path)
    yield launcher.start("messaging")
    launcher.stop_all()
