"""What the harnesses that run the ledger as real processes share (the crash test, the fault
drills): children with a log file each that can be SIGKILLed and started again, a wait until
the web process answers, and the charge tool pointed at a sandbox provider of the run's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


class Processes:
    """Named children of one run, each in a session of its own, logging to `workdir`."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[str]:
        log = open(self.workdir / f"{name}.log", "a")  # noqa: SIM115 (lives with the process)
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own group: a SIGKILL of the group takes its workers too, and Ctrl-C in the
            # terminal reaches only the conductor, which stops everything in order.
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL the process and its group: no cleanup, as a real crash."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def wait_healthy(api_url: str, timeout: float = 30.0) -> None:
    """Until GET /health answers 200 (the web process, its database and Redis are up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{api_url}/health", timeout=1, trust_env=False).is_success:
                return
        time.sleep(0.2)
    raise RuntimeError("the ledger's web process did not become healthy")


def charge_tool_file(workdir: Path, provider_url: str) -> Path:
    """A tools file declaring `charge_card` against the run's sandbox payments provider: it
    honours keys and has a lookup, so an `unknown` outcome is checked by the reconciler. The
    short `settle_after` lets "not found" count as proof within a short run."""
    tools = workdir / "tools.toml"
    tools.write_text(
        "[tools.charge_card]\n"
        'preset = "idempotent"\nhas_lookup = true\nkey_ttl = "24h"\nsettle_after = "3s"\n'
        'reconciler = "sandbox_payments"\n'
        f'reconciler_config = {{ base_url = "{provider_url}", timeout = 3 }}\n'
    )
    return tools
