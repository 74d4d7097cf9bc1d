"""A background thread that keeps an effect's lease alive while the provider call runs."""

from __future__ import annotations

import logging
import threading

from ledger_client.errors import LedgerClientError, LedgerRequestError
from ledger_client.transport import Transport

log = logging.getLogger("ledger_client")


class Heartbeat:
    """Extends the lease every `lease_seconds / 3`, so two beats can be lost before it runs
    out. A `stale_lease` answer means someone else may now own the effect: `lost` is set and
    the beating stops; the outcome report then raises `LeaseLost`."""

    def __init__(
        self, transport: Transport, effect_id: str, lease_token: str, lease_seconds: int
    ) -> None:
        self.transport = transport
        self.path = f"/effects/{effect_id}/heartbeat"
        self.body = {"lease_token": lease_token, "lease_seconds": lease_seconds}
        self.interval = lease_seconds / 3
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"ledger-heartbeat-{effect_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.transport.request("POST", self.path, self.body)
            except LedgerRequestError as exc:
                if exc.code == "stale_lease":
                    log.error("lease lost on %s: %s", self.path, exc.detail)
                    self.lost.set()
                    return
                log.warning("heartbeat %s refused: %s", self.path, exc)
            except LedgerClientError as exc:
                # The ledger is unreachable right now; the next beat may get through before
                # the lease runs out.
                log.warning("heartbeat %s failed: %s", self.path, exc)
