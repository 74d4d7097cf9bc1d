"""The stage every adapter test plays on: the real ledger (`live_server`, real PostgreSQL), one
agent and its key, the payments and messaging sandboxes as processes, and the operator's side.

    def test_one_charge(stage):
        done = stage.run_python(AGENT, "pay", "25.00")
        assert len(stage.charges()) == 1

Agent processes get their settings through the environment (`stage.env()`), the same variables
the examples read. `stage.settle(effect_id)` plays what the ledger's sweep does after an agent
died holding a lease: the lease runs out and the effect is reconciled by lookup, now.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from ledger_client import flush

from ledger.containment.keys import issue_key
from ledger.models import Agent, Effect, Tool
from reconcilers.reconcile import process_next, process_one
from reconcilers.schedules import queue_expired_leases
from reviews.decisions.decide import Ask, decide
from tests.fixtures.providers import SandboxProvider
from tests.helpers import ROOT, expire_lease

AGENTS = Path(__file__).resolve().parent / "agents"


@dataclass
class Stage:
    url: str
    agent: Agent
    key: str
    payments: SandboxProvider
    messaging: SandboxProvider
    operator: Any
    tools: dict[str, Tool]

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of an agent process: the ledger, the key and the sandboxes."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("EFFECT_LEDGER_", "SANDBOX_", "LEDGER_", "DATABASE_URL"))
        }
        env.update(
            {
                "EFFECT_LEDGER_URL": self.url,
                "EFFECT_LEDGER_API_KEY": self.key,
                "EFFECT_LEDGER_OWNER": "adapter-test",
                "SANDBOX_PAYMENTS_URL": self.payments.url,
                "SANDBOX_MESSAGING_URL": self.messaging.url,
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)  # the caller's values win, the stage's own included
        return env

    def run_python(
        self, script: str | Path, *args: str, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run `script` with the stage's environment to its end (or its SIGKILL)."""
        return subprocess.run(
            [sys.executable, str(script), *args],
            env=self.env(**env),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_python(self, script: str | Path, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            env=self.env(**env),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    # --- What happened ------------------------------------------------------------------------

    def charges(self) -> list[dict[str, Any]]:
        return [t for t in self.payments.transactions() if t.get("object", "charge") == "charge"]

    def payment_intents(self) -> list[dict[str, Any]]:
        """The Stripe PaymentIntents the payments sandbox holds (the examples pay through
        Stripe's SDK against its Stripe face)."""
        listed = self.payments.http.get(
            "/_sandbox/stripe/objects", params={"object": "payment_intent"}
        )
        return list(listed.json()["data"])

    def messages(self) -> list[dict[str, Any]]:
        return self.messaging.transactions()

    def effects(self, tool: str | None = None) -> list[Effect]:
        """The agent's actions (an operator's decision is recorded as an effect of its own,
        of kind `decision`, which this leaves out). Read from the database, as another
        reader would: first the confirmations this process writes behind are let in."""
        flush()
        rows = Effect.objects.filter(agent=self.agent, kind="action").order_by("created_at")
        return list(rows.filter(tool=tool) if tool else rows)

    # --- The ledger's and the operator's side -------------------------------------------------

    def settle(self, effect_id: Any) -> Effect:
        """The agent died holding the lease: let it run out and reconcile by lookup now."""
        expire_lease(str(effect_id))
        queue_expired_leases()
        process_one(effect_id)
        return Effect.objects.get(pk=effect_id)

    def hold_above(self, amount: str, tool: str = "charge_card") -> None:
        """Four-eyes: amounts of `tool` above `amount` (EUR) wait for an operator."""
        Tool.objects.filter(name=tool).update(
            amount_path="amount",
            currency_path="currency",
            limit_amount_per_day={"EUR": "100000.00"},
            approve_above=Decimal(amount),
        )

    def key_fields(self, *fields: str, tool: str = "charge_card") -> None:
        """The tool's business key: its effect key derives from these request fields."""
        Tool.objects.filter(name=tool).update(key_fields=list(fields))

    def approve(self, effect_id: Any) -> Effect:
        return self._decide(effect_id, "approve")

    def reject(self, effect_id: Any) -> Effect:
        return self._decide(effect_id, "reject")

    def decide_when_held(self, action: str = "approve", timeout: float = 20) -> threading.Thread:
        """An operator, in a thread of its own, who decides (`approve` or `reject`) the first
        effect found awaiting approval: for code that waits on the ledger meanwhile. Join it."""

        def operator() -> None:
            try:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    held = [e for e in self.effects() if e.status == "awaiting_approval"]
                    if held:
                        self._decide(held[0].id, action)
                        return
                    time.sleep(0.1)
            finally:
                connection.close()  # the thread's own connection, or the test DB stays in use

        thread = threading.Thread(target=operator, name="operator")
        thread.start()
        return thread

    def _decide(self, effect_id: Any, action: str) -> Effect:
        effect = Effect.objects.get(pk=effect_id)
        ask = Ask(action=action, reason="decided in a test", expected_version=effect.version)
        decide(str(effect_id), ask, user=self.operator)
        return Effect.objects.get(pk=effect_id)


@pytest.fixture
def stage(transactional_db, live_server, provider, messaging_provider, tools, olga) -> Stage:
    agent = Agent.objects.create(name="framework-agent")
    return Stage(
        url=live_server.url,
        agent=agent,
        key=issue_key(agent),
        payments=provider,
        messaging=messaging_provider,
        operator=olga,
        tools=tools,
    )


StageFactory = Callable[[], Stage]


class LedgerWorker:
    """The ledger's own background work, in a thread of the test process: every `period`
    seconds, what the sweep does (expired leases into reconciliation) and what the rq worker
    does (every due check, a lookup at the sandbox). For tests in which an agent waits for the
    ledger to settle an effect in doubt, as it would with `make run`'s worker behind it."""

    def __init__(self, period: float = 0.2) -> None:
        self.period = period
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-worker", daemon=True)

    def __enter__(self) -> LedgerWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self.errors, self.errors

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.period):
                try:
                    queue_expired_leases()
                    while process_next():
                        pass
                except Exception as exc:  # kept for the test, which fails on it at the end
                    self.errors.append(exc)
        finally:
            connection.close()  # the thread's own connection, or the test DB stays in use


@pytest.fixture
def ledger_worker(stage: Stage) -> Iterator[LedgerWorker]:
    with LedgerWorker() as worker:
        yield worker
