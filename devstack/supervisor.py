"""Keeping `make run`'s processes alive: a child that dies is started again.

gunicorn, the rq worker and the django-q cluster each survive a lost database or Redis by
themselves; what they cannot survive is being killed (an OOM kill, a SIGKILL by hand). The
supervisor then kills what is left of the child's process group first — a killed gunicorn
master leaves workers that still hold the port — and starts the child again. A child that keeps
dying (more than `RESTART_LIMIT` times within `RESTART_WINDOW` seconds) is a bug or a broken
setup, not an incident: the stack then stops, as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from devstack.embedded import say, spawn

RESTART_LIMIT = 5
RESTART_WINDOW = 60.0


@dataclass(frozen=True)
class Service:
    """A long-running child of `run`, restarted when it dies."""

    name: str
    argv: list[str]


class ChildDied(Exception):
    def __init__(self, name: str, returncode: int | None) -> None:
        if returncode is None:
            how = "stopped"
        elif returncode < 0:
            how = f"was killed by {signal.Signals(-returncode).name}"
        else:
            how = f"exited with code {returncode}"
        super().__init__(f"{name} {how} unexpectedly")
        self.name = name
        self.returncode = returncode


@dataclass
class Supervisor:
    env: dict[str, str]
    cwd: Path
    children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    _services: dict[str, Service] = field(default_factory=dict)
    _deaths: dict[str, deque[float]] = field(default_factory=dict)

    def start(self, service: Service) -> None:
        self._services[service.name] = service
        self.children.append((service.name, spawn(service.argv, env=self.env, cwd=self.cwd)))

    def check(self) -> None:
        """Restart every child that died; raise `ChildDied` for one that dies too often."""
        for index, (name, proc) in enumerate(self.children):
            if proc.poll() is None:
                continue
            death = ChildDied(name, proc.returncode)
            deaths = self._deaths.setdefault(name, deque())
            now = time.monotonic()
            deaths.append(now)
            while deaths and deaths[0] < now - RESTART_WINDOW:
                deaths.popleft()
            if len(deaths) > RESTART_LIMIT:
                raise ChildDied(f"{name} (died {len(deaths)} times within a minute)", None)
            say(f"{death}; restarting it.")
            # The group outlives a SIGKILLed leader: orphaned workers would keep the port.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            service = self._services[name]
            self.children[index] = (name, spawn(service.argv, env=self.env, cwd=self.cwd))
