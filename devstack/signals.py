"""Stop signals for the stack: SIGINT, SIGTERM and SIGHUP become a `Shutdown` exception where
that is safe (`SignalGate`), so that whatever the stack started is stopped in order."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from types import FrameType


class Shutdown(Exception):
    """Raised out of whatever the stack is doing when SIGINT, SIGTERM or SIGHUP arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGate:
    """Turns stop signals into a `Shutdown` exception, but only where that is safe.

    Inside `deferred()` a signal is remembered and raised on leaving the block, so a server
    that has just started is always registered for stopping first. After `quiet()` (cleanup
    has begun) signals are only remembered: a second Ctrl-C must not abort the cleanup, and the
    SIGKILL after STOP_TIMEOUT bounds how long it takes. In `exec` mode, `forward_to()` makes
    the gate pass SIGTERM/SIGHUP on to the foreground child instead.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._depth = 0
        self._quiet = False
        self._child: subprocess.Popen[bytes] | None = None

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self._child is not None:
            # The child shares our terminal: Ctrl-C has reached it already, and sending SIGINT
            # again would interrupt its own cleanup (pytest's teardown, say). Other stop
            # signals were sent to us alone, so pass them on.
            if signum != signal.SIGINT and self._child.poll() is None:
                self._child.send_signal(signum)
            return
        if self._depth or self._quiet:
            return
        self._quiet = True
        raise Shutdown(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if not self._depth and self.received is not None and not self._quiet:
            self._quiet = True
            raise Shutdown(self.received)

    def forward_to(self, child: subprocess.Popen[bytes] | None) -> None:
        self._child = child

    def quiet(self) -> None:
        self._quiet = True
        self._child = None


def signal_exit_code(signum: int) -> int:
    return 128 + signum  # the shell's convention for "killed by signal N"
