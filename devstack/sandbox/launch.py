"""Start a sandbox provider as a child process, wait until it listens, stop it.

    with running("payments", tmp_dir) as provider:
        httpx.post(f"{provider.url}/charges", ...)

The one launcher for everything that needs the outside world in a process of its own: the
tests (`tests/fixtures/providers.py`), the crash test and the recovery benchmark; `make run`
supervises its providers itself but builds their command line here. Like the providers, this
module uses only the standard library, so importing it never sets up Django.
"""

from __future__ import annotations

import contextlib
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from time import monotonic
from typing import Self

ROOT = Path(__file__).resolve().parents[2]
# The line `devstack.sandbox.service.serve` prints once the socket is bound.
READY = re.compile(r"sandbox \w+ listening on (http://\S+:(\d+))")
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0


# The sandbox's own providers; any other name is a provider's fake in its own package.
SANDBOX = ("payments", "messaging", "stripe_reporting")


def provider_module(name: str) -> str:
    """The module that runs provider `name`: `devstack.sandbox.<name>` for the sandbox's own,
    `devstack.providers.<name>.fake` for the fake of a real provider (Stripe, Slack, …)."""
    return f"devstack.sandbox.{name}" if name in SANDBOX else f"devstack.providers.{name}.fake"


def provider_argv(name: str, port: int, *args: str) -> list[str]:
    """The command line of provider `name` ("payments", "slack", …); port 0: a free one."""
    return [sys.executable, "-m", provider_module(name), "--port", str(port), *args]


class SandboxProcess:
    """One provider process with a store of its own; restartable on the same port and store."""

    def __init__(
        self,
        name: str,
        store: Path,
        log: Path,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.store = store
        self.log_path = log
        self.args = args
        self.env = env
        self.port = 0  # chosen by the provider at first start, kept across restarts
        self.url = ""
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> Self:
        argv = provider_argv(self.name, self.port, "--store", str(self.store), *self.args)
        with self.log_path.open("a") as log:
            # A session of its own: Ctrl-C in the terminal reaches only our parent, which then
            # stops the provider after whatever still talks to it.
            self.process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        self.url, port = self._wait_until_listening()
        self.port = int(port)
        return self

    def _wait_until_listening(self) -> tuple[str, str]:
        assert self.process is not None and self.process.stdout is not None
        deadline = monotonic() + START_TIMEOUT
        while monotonic() < deadline:
            # select, not a bare readline: a provider that hangs before printing must not hang
            # whoever started it.
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                match = READY.search(self.process.stdout.readline())
                if match:
                    return match.group(1), match.group(2)
            if self.process.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"sandbox {self.name} did not start:\n{self.log()}")

    def stop(self) -> None:
        """SIGTERM and wait: the provider's clean shutdown (SIGKILL if it takes too long)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close()

    def kill(self) -> None:
        """SIGKILL: the provider dies mid-whatever, as in a crash; the store stays."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._close()

    def restart(self) -> Self:
        """A new process on the same port and the same store (stops the old one if alive)."""
        self.stop()
        return self.start()

    def _close(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


@contextlib.contextmanager
def running(
    name: str, directory: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[SandboxProcess]:
    """Provider `name` on a free port, its store and log in `directory`; stopped on exit."""
    provider = SandboxProcess(
        name, directory / f"{name}.sqlite3", directory / f"{name}.log", args, env
    )
    try:
        yield provider.start()
    finally:
        provider.stop()
