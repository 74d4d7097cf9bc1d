"""demo/run.py end to end: four agents through the ledger (live_server) and both sandboxes, the
charge paid through Stripe's SDK and declared as the repository's tools.toml declares it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.containment.keys import issue_key
from ledger.models import Agent, Tool
from ledger.policy.toolfile import load

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo" / "run.py"


def payment_intents(provider) -> list[dict]:
    """The PaymentIntents the payments sandbox's Stripe face holds."""
    listed = provider.http.get("/_sandbox/stripe/objects", params={"object": "payment_intent"})
    return listed.json()["data"]


def test_the_demo_charges_once_notifies_after_the_interlock_and_replays(
    live_server, payments_provider, messaging_provider, monkeypatch
):
    load(ROOT / "tools.toml")
    charge = Tool.objects.get(name="charge_card")
    assert (charge.reconciler, charge.mode) == ("stripe", "test")
    charge.reconciler_config = {**charge.reconciler_config, "base_url": payments_provider.url}
    charge.save()
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
    [intent] = payment_intents(payments_provider)
    assert intent["metadata"]["ledger_key"] and intent["status"] == "succeeded"
    assert len(messaging_provider.transactions()) == 1
