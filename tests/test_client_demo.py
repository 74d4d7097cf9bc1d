"""demo/run.py end to end: four agents through the ledger (live_server) and both sandboxes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.models import Agent
from ledger.policy.agentkeys import issue_key

pytestmark = pytest.mark.django_db(transaction=True)

DEMO = Path(__file__).resolve().parent.parent / "demo" / "run.py"


def test_the_demo_charges_once_notifies_after_the_interlock_and_replays(
    live_server, tools, payments_provider, messaging_provider
):
    env = dict(os.environ)
    for role in ("planner", "validator", "executor", "fulfilment"):
        env[f"LEDGER_{role.upper()}_KEY"] = issue_key(Agent.objects.create(name=role))
    argv = [
        sys.executable,
        str(DEMO),
        "--ledger",
        live_server.url,
        "--payments",
        payments_provider.url,
        "--messaging",
        messaging_provider.url,
        "--run-id",
        "demo-test",
    ]

    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "blocked: the payment is dispatching" in first.stdout
    assert "stands down" in first.stdout or "not charging again" in first.stdout

    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "notification already sent" in again.stdout
    assert len(payments_provider.transactions()) == 1
    assert len(messaging_provider.transactions()) == 1
