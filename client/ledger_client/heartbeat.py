"""Keeps an effect's lease alive while the provider call runs: a beat every `lease_seconds / 3`,
timed by a `Clock` (a background thread unless the caller passes another)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ledger_client.errors import LedgerClientError, LedgerRequestError
from ledger_client.transport import Transport

log = logging.getLogger("ledger_client")


class Clock(Protocol):
    """Runs the heartbeat's timer. `ThreadClock` is real time; a test passes a clock whose
    time it advances by hand, so that it need not sleep."""

    def every(self, seconds: float, action: Callable[[], bool], name: str) -> Callable[[], None]:
        """Call `action` every `seconds`, without blocking the caller, until it returns False.
        The function returned stops the calls and waits for one in progress to finish."""
        ...


class ThreadClock:
    """Real time: a daemon thread (named `name`) sleeps between the calls."""

    def every(self, seconds: float, action: Callable[[], bool], name: str) -> Callable[[], None]:
        stopped = threading.Event()

        def run() -> None:
            while not stopped.wait(seconds) and action():
                pass

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()

        def stop() -> None:
            stopped.set()
            if thread is not threading.current_thread():
                thread.join()

        return stop


class Heartbeat:
    """Extends the lease every `lease_seconds / 3`, so two beats can be lost before it runs
    out. A `stale_lease` answer means someone else may now own the effect: `lost` is set and
    the beating stops; the outcome report then raises `LeaseLost`."""

    def __init__(
        self,
        transport: Transport,
        effect_id: str,
        lease_token: str,
        lease_seconds: int,
        clock: Clock | None = None,
        *,
        lease_until: float | None = None,
    ) -> None:
        self.transport = transport
        self.lease_seconds = lease_seconds
        # When the lease runs out at the latest, on time.monotonic(): counted from the moment
        # the claim or beat was sent, which is no later than the ledger started the lease.
        self.lease_until = time.monotonic() + lease_seconds if lease_until is None else lease_until
        self.path = f"/effects/{effect_id}/heartbeat"
        self.body = {"lease_token": lease_token, "lease_seconds": lease_seconds}
        self.interval = lease_seconds / 3
        self.lost = threading.Event()
        # The halt the last answer carried (None: nothing covers the effect now).
        self.halt: dict[str, Any] | None = None
        self._name = f"ledger-heartbeat-{effect_id}"
        self._clock = clock or ThreadClock()
        self._stop: Callable[[], None] | None = None

    def start(self) -> None:
        self._stop = self._clock.every(self.interval, self.beat, self._name)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()

    def beat(self) -> bool:
        """Extend the lease once; False once it is lost, and beating should stop."""
        try:
            sent = time.monotonic()
            _, answer = self.transport.request("POST", self.path, self.body)
            self.lease_until = sent + self.lease_seconds
            self.halt = answer.get("halt") if isinstance(answer, dict) else None
        except LedgerRequestError as exc:
            if exc.code == "stale_lease":
                log.error("lease lost on %s: %s", self.path, exc.detail)
                self.lost.set()
                return False
            log.warning("heartbeat %s refused: %s", self.path, exc)
        except LedgerClientError as exc:
            # The ledger is unreachable right now; the next beat may get through before
            # the lease runs out.
            log.warning("heartbeat %s failed: %s", self.path, exc)
        return True
