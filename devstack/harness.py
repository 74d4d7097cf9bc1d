"""What the harnesses that run the ledger as real processes share (the crash test, the fault
drills): children with a log file each that can be SIGKILLed and started again, a wait until
the web process answers, and the charge tool pointed at a sandbox provider of the run's own,
declared as that provider allows (keys, a complete lookup only, or statements only).
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


# The charge tool as each crash-test provider lets it be declared (`charge_tool_file`).
# keys: the provider honours keys and has a lookup, so an `unknown` outcome is checked by the
# reconciler; the short `settle_after` lets "not found" count as proof within a short run.
# lookup-only: a search by reference that is complete (a list) but no deduplication, so only
# a late enough not-found proves absence (`ledger.rules.lookup_absence`), on short clocks: a call
# takes at most 2 s (the lease), the search has no lag, not-found proves absence 3 s after the
# lease.
# statement: nothing but the provider's statements (`ledger.statements`), which say what
# happened once every dispatch window (claim - skew … lease end + settle_after + skew) lies
# inside a final one.
CHARGE_TOOLS = {
    "keys": (
        'preset = "idempotent"\nhas_lookup = true\nkey_ttl = "24h"\nsettle_after = "3s"\n'
        'reconciler = "sandbox_payments"\n'
    ),
    "lookup-only": (
        'preset = "lookup"\ncall_timeout = "2s"\nsearch_lag = "0s"\nsettle_after = "3s"\n'
        'lookup_proves_absence = true\nlookup_horizon = "1h"\nreconciler = "sandbox_payments"\n'
    ),
    "statement": (
        'preset = "unsafe"\nsettle_after = "3s"\nstatements = true\namount_path = "amount"\n'
        'currency_path = "currency"\namount_unit = "major"\n'
        'statement_reference = "idempotency_key"\nstatement_skew = "1s"\nreconciler = "manual"\n'
    ),
}
# The clocks above that a run waits out before a statement may be final for its windows.
SETTLE_AFTER_SECONDS, STATEMENT_SKEW_SECONDS = 3.0, 1.0


def charge_tool_file(workdir: Path, provider_url: str, provider: str = "keys") -> Path:
    """A tools file declaring `charge_card` against the run's sandbox payments provider, as
    `CHARGE_TOOLS[provider]` says."""
    tools = workdir / "tools.toml"
    tools.write_text(
        "[tools.charge_card]\n"
        + CHARGE_TOOLS[provider]
        + f'reconciler_config = {{ base_url = "{provider_url}", timeout = 3 }}\n'
    )
    return tools
