"""`make examples`: the framework examples (examples/<framework>/agent.py) against a whole
stack, each with an agent of its own; exits non-zero if any fails.

    python -m devstack.examples [NAME ...]      # every example, or the named ones

The stack is `python -m devstack.stack run` (embedded PostgreSQL and Redis when DATABASE_URL
and REDIS_URL are unset) with a layout of its own (`devstack.layout`): its files under
var/examples (STACK_DIR), so its database, secrets, run.env and sandbox stores are not
`make run`'s, and free ports unless PORT, SANDBOX_PAYMENTS_PORT or SANDBOX_MESSAGING_PORT
name them, so it runs beside `make run`. Before each example the sandboxes are emptied, so that
the counts the example prints (the provider's charges against the ledger's effects) are its
own. Every example reads EFFECT_LEDGER_URL, EFFECT_LEDGER_API_KEY, SANDBOX_PAYMENTS_URL and
SANDBOX_MESSAGING_URL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from devstack.embedded import ROOT, VAR, say
from devstack.layout import StackLayout, free_layout
from devstack.provision import manage_argv

EXAMPLES = ROOT / "examples"
STACK_DIR = VAR / "examples"
START_TIMEOUT = 180.0
EXAMPLE_TIMEOUT = 300.0


def examples(names: list[str]) -> list[Path]:
    found = sorted(p.parent for p in EXAMPLES.glob("*/agent.py"))
    if names:
        found = [p for p in found if p.name in names]
        missing = set(names) - {p.name for p in found}
        if missing:
            raise SystemExit(f"no such example: {', '.join(sorted(missing))}")
    return found


def _wait_until_up(stack: subprocess.Popen[bytes], layout: StackLayout) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    urls = [
        f"{_base(layout)}/api/v1/health",
        f"{layout.sandbox_url('payments')}/_sandbox/health",
        f"{layout.sandbox_url('messaging')}/_sandbox/health",
    ]
    while time.monotonic() < deadline:
        if stack.poll() is not None:
            raise SystemExit(f"the stack exited with {stack.returncode} before it was up")
        try:
            if all(httpx.get(u, timeout=2, trust_env=False).status_code == 200 for u in urls):
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise SystemExit(f"the stack was not up after {START_TIMEOUT:g} s")


def _base(layout: StackLayout) -> str:
    return f"http://127.0.0.1:{layout.port}"


def _new_key(name: str, layout: StackLayout) -> str:
    """A key of a new agent in the examples' own database (its stack's run.env)."""
    done = subprocess.run(
        manage_argv("createagent", f"examples-{name}-{int(time.time())}"),
        cwd=ROOT,
        env={**os.environ, "LEDGER_ENV_FILE": str(layout.run_env_file)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def _reset_sandboxes(layout: StackLayout) -> None:
    for provider in ("payments", "messaging"):
        url = f"{layout.sandbox_url(provider)}/_sandbox/reset"
        httpx.post(url, timeout=5, trust_env=False).raise_for_status()


def run_example(directory: Path, layout: StackLayout) -> bool:
    say(f"example {directory.name}: starting")
    _reset_sandboxes(layout)
    env = {
        **os.environ,
        "EFFECT_LEDGER_URL": _base(layout),
        "EFFECT_LEDGER_API_KEY": _new_key(directory.name, layout),
        "EFFECT_LEDGER_OWNER": f"example-{directory.name}",
        "SANDBOX_PAYMENTS_URL": layout.sandbox_url("payments"),
        "SANDBOX_MESSAGING_URL": layout.sandbox_url("messaging"),
        "PYTHONPATH": str(ROOT),
    }
    try:
        done = subprocess.run(
            [sys.executable, str(directory / "agent.py")],
            cwd=directory,
            env=env,
            timeout=EXAMPLE_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        say(f"example {directory.name}: FAILED (no end after {EXAMPLE_TIMEOUT:g} s)")
        return False
    ok = done.returncode == 0
    say(f"example {directory.name}: {'ok' if ok else f'FAILED (exit {done.returncode})'}")
    return ok


def main(argv: list[str]) -> int:
    chosen = examples(argv)
    try:
        layout = free_layout(Path(os.environ.get("STACK_DIR") or STACK_DIR), os.environ)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    say(f"examples' stack: {layout.describe_ports()}, files under {layout.directory}")
    results: dict[str, bool] = {}
    stack = subprocess.Popen(
        [sys.executable, "-m", "devstack.stack", "run"],
        cwd=ROOT,
        env={**os.environ, **layout.as_env()},
        start_new_session=True,
    )
    try:
        _wait_until_up(stack, layout)
        results = {d.name: run_example(d, layout) for d in chosen}
    finally:
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGTERM)
            try:
                stack.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(stack.pid, signal.SIGKILL)
    failed = [name for name, ok in results.items() if not ok]
    say(f"examples: {len(results) - len(failed)} of {len(results)} passed")
    if failed:
        say(f"failed: {', '.join(failed)}")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
