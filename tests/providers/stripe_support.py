"""What the Stripe adapter's tests share: the payments sandbox (a real process) whose Stripe face
plays Stripe, the crash test's tool declared through loadtools pointing at it, and payments
made through the official SDK (`devstack.providers.stripe.caller`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devstack.providers.stripe import caller
from ledger.models import Effect, Tool
from ledger.policy import digests
from tests.providers import tooling

TOOL = "charge_stripe"
REFUND_TOOL = "refund_stripe"
TARGET = "cus_alice"
CHARGE = {"amount": "10.99", "currency": "EUR"}


def declare(directory: Path, url: str, name: str = TOOL, **changes: Any) -> Tool:
    """The caller's tool table, its base URL the sandbox's, declared as loadtools does; a change
    to None leaves the key out, `config` adds to the reconciler_config."""
    return tooling.declare(directory, caller, url, name, **changes)


@pytest.fixture
def stripe_sandbox(start_sandbox, monkeypatch):
    """The payments sandbox, the Stripe test key in the variable the tool names."""
    monkeypatch.setenv(caller.API_KEY_ENV, caller.API_KEY)
    return start_sandbox("payments")


@pytest.fixture
def stripe_tool(stripe_sandbox, tmp_path, tools) -> Tool:
    return declare(tmp_path, stripe_sandbox.url)


@pytest.fixture
def refund_tool(stripe_sandbox, tmp_path, tools) -> Tool:
    return declare(tmp_path, stripe_sandbox.url, REFUND_TOOL, description="Refund through Stripe")


@pytest.fixture
def make_payment(make_effect, stripe_tool):
    """An effect of the Stripe tool in any state (a charge unless the request names one)."""

    def make(status: str = "unknown", tool: str = TOOL, **fields: Any) -> Effect:
        asked = fields.pop("request", None) or dict(CHARGE)
        target = fields.pop("target", TARGET)
        return make_effect(
            status,
            tool=tool,
            target=target,
            request=asked,
            request_hash=digests.request_hash(tool, target, asked),
            **fields,
        )

    return make


def pay(sandbox, effect: Effect, fault: str = "", **asked: Any) -> dict:
    """The effect's payment made through the SDK, as the crash test's worker makes it."""
    labels = {"idempotency_key": effect.idempotency_key, "id": str(effect.id)}
    return caller.send(
        sandbox.url, {**labels, "target": effect.target}, asked or effect.request, fault
    )


def stripe_settings(sandbox, **knobs: int) -> dict:
    answer = sandbox.http.post("/_sandbox/stripe/settings", json=knobs)
    answer.raise_for_status()
    return answer.json()


def objects(sandbox, kind: str = "payment_intent") -> list[dict[str, Any]]:
    answer = sandbox.http.get("/_sandbox/stripe/objects", params={"object": kind})
    answer.raise_for_status()
    return answer.json()["data"]
