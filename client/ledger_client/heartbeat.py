"""Keeps an effect's lease alive while the provider call runs: a beat every `lease_seconds / 3`,
so two beats can be lost before the lease runs out. The sync client beats from a `Clock` (a
daemon thread unless the caller passes another); the async client from an asyncio task, so
that nothing ever sleeps on the event loop.

A `stale_lease` answer means someone else may now own the effect: `lost` is set and the beating
stops; the outcome report then raises `LeaseLost`. A ledger that does not answer is tried again
at the next beat, while the lease may still hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ledger_client import protocol
from ledger_client.errors import LedgerClientError, LedgerRequestError
from ledger_client.models import Halt

if TYPE_CHECKING:
    from ledger_client.aio import AsyncTransport
    from ledger_client.sync import Transport

log = logging.getLogger("ledger_client")


class Clock(Protocol):
    """Runs the sync heartbeat's timer. `ThreadClock` is real time; a test passes a clock whose
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
    """The lease's state, as the beats leave it."""

    def __init__(self, effect_id: str, lease_token: str, lease_seconds: int, sent: float) -> None:
        self.call = protocol.heartbeat(effect_id, lease_token, lease_seconds)
        self.lease_seconds = lease_seconds
        # When the lease runs out at the latest, on time.monotonic(): counted from the moment
        # the claim or beat was sent, which is no later than the ledger started the lease.
        self.lease_until = sent + lease_seconds
        self.interval = lease_seconds / 3
        self.lost = False
        self.halt: Halt | None = None
        self.name = f"ledger-heartbeat-{effect_id}"

    def stop(self) -> None:
        """Stop beating (sync client)."""

    async def astop(self) -> None:
        """Stop beating (async client)."""

    def _answered(self, sent: float, answer: dict[str, Any]) -> None:
        self.lease_until = sent + self.lease_seconds
        halt = answer.get("halt")
        self.halt = Halt.model_validate(halt) if isinstance(halt, dict) else None

    def _failed(self, exc: LedgerClientError) -> bool:
        """Whether to go on beating after `exc`."""
        if isinstance(exc, LedgerRequestError) and exc.code == "stale_lease":
            log.error("lease lost on %s: %s", self.call.path, exc.detail)
            self.lost = True
            return False
        log.warning("heartbeat %s failed: %s", self.call.path, exc)
        return True


class ThreadHeartbeat(Heartbeat):
    def __init__(
        self,
        transport: Transport,
        effect_id: str,
        lease_token: str,
        lease_seconds: int,
        sent: float,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(effect_id, lease_token, lease_seconds, sent)
        self._transport = transport
        self._stop = (clock or ThreadClock()).every(self.interval, self.beat, self.name)

    def beat(self) -> bool:
        """Extend the lease once; False once it is lost, and beating should stop."""
        sent = time.monotonic()
        try:
            answer = self._transport.send(self.call)
        except LedgerClientError as exc:
            return self._failed(exc)
        self._answered(sent, answer)
        return True

    def stop(self) -> None:
        self._stop()


class TaskHeartbeat(Heartbeat):
    def __init__(
        self,
        transport: AsyncTransport,
        effect_id: str,
        lease_token: str,
        lease_seconds: int,
        sent: float,
    ) -> None:
        super().__init__(effect_id, lease_token, lease_seconds, sent)
        self._transport = transport
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            sent = time.monotonic()
            try:
                answer = await self._transport.send(self.call)
            except LedgerClientError as exc:
                if not self._failed(exc):
                    return
                continue
            self._answered(sent, answer)

    async def astop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
