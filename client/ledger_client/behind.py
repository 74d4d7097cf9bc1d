"""Confirmations written behind: a guarded call's `confirmed` outcome sent by a background
thread while the tool's result goes back to the agent, instead of before it (ADR 0023).

Ordering and visibility stay those of a synchronous report, seen from the same client:
- every other request of the client waits until the outcomes handed over before it are sent
  (`Reporter.drain`), so its next intent, a replay of the same call, a recovery or a read
  never overtakes them; a downstream effect's claim finds its upstream confirmed;
- `Ledger.close()` / `AsyncLedger.aclose()` and the interpreter's exit wait for them too
  (up to `EXIT_WAIT` seconds at exit);
- `flush()` waits for every client's, for code that reads the ledger another way (its own
  HTTP client, SQL) right after a guarded call.

What changes is only what happens when the process dies (or the ledger stays unreachable past
the client's retries) in the few milliseconds between the provider's answer and the ledger's:
the effect stays `dispatching`, its lease runs out and the ledger's recovery asks the provider,
exactly as for a process killed during the call. A report the ledger refuses (the lease was
lost meanwhile) or cannot take is logged on `ledger_client` and counted in `Reporter.failed`;
nothing is raised into the agent, whose tool has already returned.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledger_client.errors import LedgerClientError
from ledger_client.protocol import Call

log = logging.getLogger("ledger_client")

# How long the interpreter's exit waits for outcomes still being written.
EXIT_WAIT = 10.0


_Item = tuple[str, Call, Callable[[dict[str, Any]], None], contextvars.Context]


@dataclass(frozen=True)
class Failed:
    """An outcome the ledger did not take: the effect, and why."""

    effect_id: str
    error: str


class Reporter:
    """Sends handed-over outcome calls in order, on a daemon thread of its own (started with
    the first, ended by `close`), through `send` (a transport's sending loop, with its
    retries)."""

    def __init__(self, send: Callable[[Call], dict[str, Any]]) -> None:
        self._send = send
        self.failed: list[Failed] = []
        self._reset()
        _REPORTERS.add(self)

    def _reset(self) -> None:
        """Empty, with no thread: at the start, and in a forked child, where the parent's
        thread and queue are not ours and its lock may have been held (the parent sends what
        it handed over)."""
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._busy = 0  # handed over and not yet answered (queued + the one in flight)
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def pending(self) -> int:
        return self._busy

    def submit(self, effect_id: str, call: Call, settled: Callable[[dict[str, Any]], None]) -> None:
        """Send `call` soon; `settled(answer)` runs on the reporter's thread once it is in."""
        with self._cond:
            self._queue.append((effect_id, call, settled, contextvars.copy_context()))
            self._busy += 1
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(
                    target=self._run, name="ledger-outcomes", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every outcome handed over so far is sent (or given up); False when
        `timeout` seconds passed first. Returns at once on the reporter's own thread."""
        if self._busy == 0 or threading.current_thread() is self._thread:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def close(self) -> None:
        """Send what is handed over, then end the thread (the next `submit` starts another)."""
        self.drain()
        with self._cond:
            thread, self._thread, self._closing = self._thread, None, True
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closing)
                if not self._queue:
                    return
                effect_id, call, settled, context = self._queue.popleft()
            try:
                # In the caller's context: its trace goes with the request.
                settled(context.run(self._send, call))
            except LedgerClientError as exc:
                self.failed.append(Failed(effect_id, str(exc)))
                log.warning(
                    "effect %s: the confirmation was not recorded (%s); the ledger's recovery "
                    "will ask the provider",
                    effect_id,
                    exc,
                )
            except Exception:  # a bug must not kill the thread and leave drain() waiting
                self.failed.append(Failed(effect_id, "unexpected error"))
                log.exception("effect %s: sending the confirmation failed", effect_id)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()


_REPORTERS: weakref.WeakSet[Reporter] = weakref.WeakSet()


def flush(timeout: float | None = None) -> bool:
    """Wait until every confirmation this process handed to a background thread is recorded
    in the ledger (or given up); False if `timeout` seconds passed first."""
    return all(reporter.drain(timeout) for reporter in list(_REPORTERS))


@atexit.register
def _at_exit() -> None:
    if not flush(EXIT_WAIT):
        log.warning("exiting with confirmations not yet recorded; the ledger's recovery will ask")


def _in_forked_child() -> None:
    for reporter in list(_REPORTERS):
        reporter._reset()


os.register_at_fork(after_in_child=_in_forked_child)
