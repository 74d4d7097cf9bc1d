"""A resumed call does not wait out its own dead predecessor's lease
(`ledger_client.holders`): a process of this host that claimed under the client's default
owner label and died is certainly gone, so the guard ends its lease (POST /effects/{id}/end-
lease) and the ledger's recovery settles the effect now. Anything less certain is waited out:
another host's label, an application's own label, a live PID, this process's own PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from typing import Any

import pytest
from ledger_client import Ledger, bind_position, guarded
from ledger_client.holders import holder_gone, process_owner

from ledger.models.states import Status
from tests.adapters.conftest import AGENTS
from tests.helpers import events_of

pytestmark = pytest.mark.django_db(transaction=True)

RUN = "run-dead-holder"


def _label(pid: int) -> str:
    return process_owner().replace(f":{os.getpid()}", f":{pid}", 1)


def test_a_process_of_this_host_that_exited_is_gone_and_nothing_less_certain_is():
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()  # reaped: no process holds its PID now
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert holder_gone(_label(exited.pid))
        assert not holder_gone(_label(living.pid))
        assert not holder_gone(process_owner())  # this very process
        assert not holder_gone(_label(exited.pid).replace(socket.gethostname(), "elsewhere", 1))
        assert not holder_gone(f"{socket.gethostname()}:{exited.pid}:1")  # another namespace
        assert not holder_gone("executor-1")  # an application's own label
        assert not holder_gone(f"{socket.gethostname()}:x:{exited.pid}")
    finally:
        living.kill()
        living.wait()


def _resumed_pay(stage: Any, ledger: Ledger):
    @guarded(tool="charge_card", target="{account}", ledger=ledger, settle_timeout=30)
    def pay(account: str, amount: str, currency: str = "EUR") -> dict:
        """Charge an account."""
        raise AssertionError("the charge was made before the crash: it must not run again")

    return pay


def test_a_resumed_call_ends_its_dead_predecessors_lease_and_returns_its_charge(
    stage, ledger_worker
):
    died = stage.run_python(
        AGENTS / "dies_holding.py",
        *(RUN, "acct_dead", "25.00"),
        EFFECT_LEDGER_OWNER="",
        EFFECT_LEDGER_LEASE_SECONDS="600",
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    [effect] = stage.effects()
    assert effect.status == Status.DISPATCHING
    # The child's default label: this host and PID namespace, its own PID.
    assert effect.lease_owner == _label(_pid_of(effect.lease_owner)) != process_owner()
    [charge] = stage.charges()

    # The lease has ten minutes to run; the resumed call waits at most thirty seconds.
    ledger = Ledger(stage.url, stage.key, owner=process_owner(), retries=1)
    with ledger, bind_position(RUN, "turn-1"):
        result = _resumed_pay(stage, ledger)("acct_dead", "25.00")

    assert result["id"] == charge["id"]
    assert len(stage.charges()) == 1
    ended = [e for e in events_of(effect.id) if e.kind == "lease_ended"]
    assert [(e.actor, e.data["owner"]) for e in ended] == [
        (f"agent:{stage.agent.name}", effect.lease_owner)
    ]


def _pid_of(label: str) -> int:
    return int(label.split(":")[1])
