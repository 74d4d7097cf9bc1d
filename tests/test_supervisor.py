"""`make run`'s supervisor: a child that dies is started again, its orphans killed first; one
that keeps dying stops the stack."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import pytest

from devstack.supervisor import RESTART_LIMIT, ChildDied, Service, Supervisor
from tests.helpers import ROOT

# A leader that starts a grandchild in its own process group, as gunicorn starts its workers,
# and prints the grandchild's pid.
FAMILY = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: it only waits for its parent to reap it.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def supervisor():
    running = Supervisor(dict(os.environ), ROOT)
    yield running
    for _name, proc in running.children:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_killed_child_is_started_again_and_its_orphans_are_killed(supervisor, tmp_path):
    out = tmp_path / "grandchild.pid"
    argv = [
        sys.executable,
        "-c",
        FAMILY.replace("flush=True", f"file=open({str(out)!r}, 'w'), flush=True"),
    ]
    supervisor.start(Service("family", argv))
    wait_for(lambda: out.exists() and out.read_text().strip())
    [(_, first)] = supervisor.children
    orphan = int(out.read_text())

    first.send_signal(signal.SIGKILL)
    first.wait()
    assert alive(orphan)  # the leader's death alone leaves its worker running
    supervisor.check()

    [(name, second)] = supervisor.children
    assert (name, second.poll()) == ("family", None)
    assert second.pid != first.pid
    wait_for(lambda: not alive(orphan))


def test_a_child_that_keeps_dying_stops_the_stack(supervisor):
    supervisor.start(Service("crasher", [sys.executable, "-c", "raise SystemExit(3)"]))
    for _ in range(RESTART_LIMIT):
        supervisor.children[0][1].wait()
        supervisor.check()
    supervisor.children[0][1].wait()
    with pytest.raises(ChildDied, match="crasher"):
        supervisor.check()
