"""The charge the crash-matrix agents make (`langgraph_crashes.py`, `pydantic_ai_crashes.py`,
`dbos_crashes.py`; the MCP proxy dies at the same places around its relay, `mcp_crash_proxy.py`),
with its three places to die: with probability `kill_p` each, the process SIGKILLs itself before
the charge is sent, while it is in flight (a timer fires during the request), and after the
provider answered, before the guard records the outcome. Each kill prints `KILL <place>`."""

from __future__ import annotations

import os
import random
import signal
import threading
from typing import Any

import httpx
from ledger_client import current_effect


def die(place: str) -> None:
    print("KILL", place, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def maybe_die(place: str, kill_p: float) -> None:
    if random.random() < kill_p:
        die(place)


def in_flight(kill_p: float) -> threading.Timer | None:
    """With probability `kill_p`, a timer that kills the process within 60 ms: while the
    request it was started before is on its way or being served. Cancel it once answered."""
    if random.random() >= kill_p:
        return None
    timer = threading.Timer(random.uniform(0.0, 0.06), die, ["in-flight"])
    timer.start()
    return timer


def charge(amount: str, currency: str, account: str, kill_p: float) -> dict[str, Any]:
    """Charge the sandbox payments provider under the running effect's idempotency key."""
    maybe_die("before-send", kill_p)
    timer = in_flight(kill_p)
    response = httpx.post(
        os.environ["SANDBOX_PAYMENTS_URL"] + "/charges",
        json={"amount": amount, "currency": currency, "account": account},
        headers={"Idempotency-Key": current_effect().idempotency_key},
        timeout=10,
    )
    if timer is not None:
        timer.cancel()
    response.raise_for_status()
    maybe_die("after-answer", kill_p)
    made: dict[str, Any] = response.json()
    return made
