"""The ledger's processes for a drill, started as `make run` starts them (`devstack.stack`):
gunicorn behind nginx (`devstack.web`), the non-forking rq worker and the django-q2
cluster, plus a sandbox payments provider of the drill's own for the reconciler's lookups."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil

from devstack.embedded import free_port, stop_processes
from devstack.harness import Processes, charge_tool_file, wait_healthy
from devstack.provision import fresh_database
from devstack.sandbox.launch import SandboxProcess
from devstack.stack import app_services

WEB, FRONT, RQ_WORKER, QCLUSTER = "gunicorn", "nginx", "rqworker", "qcluster"
SERVICES = (WEB, FRONT, RQ_WORKER, QCLUSTER)  # in start order
DATABASE = "faultdrill"
AGENT = "faultdrill"
START_TIMEOUT = 60.0


class DrillStack(Processes):
    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        super().__init__(workdir, env)
        self.port = free_port()
        self.provider = SandboxProcess(
            "payments", workdir / "payments.sqlite3", workdir / "payments.log", (), env
        )
        self.argv = {
            service.name: service.argv
            for service in app_services("127.0.0.1", self.port)
            if service.name in SERVICES
        }

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1"

    def prepare(self) -> str:
        """A fresh, migrated database with the charge tool pointed at our provider; returns
        the drill agent's key. Migrating also creates the django-q2 schedules."""
        self.provider.start()
        tools = charge_tool_file(self.workdir, self.provider.url)
        fresh, (key,) = fresh_database(self.env, DATABASE, tools=tools, agents=[AGENT])
        self.env.update(fresh)
        return key

    def start(self) -> None:
        for name in SERVICES:
            self.spawn(name, self.argv[name])
        wait_healthy(self.api_url, START_TIMEOUT)

    def restart_web(self) -> None:
        """What a supervisor does after the web process died: SIGKILL what is left of its
        process group, then start it again. Orphaned workers of a killed master keep the
        listening socket (and serve their keep-alive connections) for up to gunicorn's
        graceful timeout, 30 s, and a new master cannot bind until they are gone; systemd's
        default control-group kill and `devstack.supervisor` (`make run`) clear them the
        same way."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[WEB].pid, signal.SIGKILL)
        self.spawn(WEB, self.argv[WEB])
        wait_healthy(self.api_url, START_TIMEOUT)

    def pids(self) -> dict[str, int]:
        return {name: self.procs[name].pid for name in SERVICES}

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def web_workers(self) -> list[int]:
        with contextlib.suppress(psutil.Error):
            return [child.pid for child in psutil.Process(self.procs[WEB].pid).children()]
        return []

    def kill_pid(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def kill_web_master(self) -> None:
        """SIGKILL the gunicorn master alone: its workers notice they were orphaned and stop
        after the requests they hold, as on a real crash of the master."""
        proc = self.procs[WEB]
        self.kill_pid(proc.pid)
        proc.wait()

    def log_count(self, name: str, text: str) -> int:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace").count(text) if path.exists() else 0

    def stop(self) -> None:
        # SIGTERM first (gunicorn, rq and django-q stop their own workers), SIGKILL the group
        # after; then the provider.
        stop_processes(reversed(list(self.procs.items())), timeout=10)
        self.provider.kill()
