"""The check every example ends with: the provider's record against the ledger's.

For the run, each tool's effects in the ledger (its journal) and what the sandbox provider did
under one of those effects' idempotency keys are counted and printed:

    charges at the provider: 1 · effects in the ledger: 1
    messages at the provider: 1 · effects in the ledger: 1

They agree when each tool has exactly one effect, confirmed, and the provider did it once.
"""

from __future__ import annotations

import os

import httpx
from ledger_client import Ledger, flush

# (tool, the environment variable of its sandbox, what the provider made)
CHECKED = (
    ("charge_card", "SANDBOX_PAYMENTS_URL", "charges"),
    ("send_email", "SANDBOX_MESSAGING_URL", "messages"),
)


def at_provider(base_url: str, keys: set[str]) -> int:
    """How many of the sandbox's records carry one of these idempotency keys: the Stripe
    PaymentIntents its payments face holds (the key in their metadata), the messages the
    messaging sandbox sent (the key it received)."""
    if base_url == os.environ.get("SANDBOX_PAYMENTS_URL"):
        path, params = "/_sandbox/stripe/objects", {"object": "payment_intent"}
    else:
        path, params = "/_sandbox/transactions", {}
    reply = httpx.get(f"{base_url}{path}", params=params, trust_env=False)
    reply.raise_for_status()
    return sum(
        1
        for t in reply.json()["data"]
        if ((t.get("metadata") or {}).get("ledger_key") or t.get("received_idempotency_key"))
        in keys
    )


def counts_agree(run_id: str) -> bool:
    """Print the counts of `run_id` and say whether they agree. The guard writes its last
    confirmation behind the tool's result; this reads the ledger with a client of its own, so
    it lets that confirmation in first (`flush`)."""
    flush()
    with Ledger(
        os.environ["EFFECT_LEDGER_URL"], os.environ["EFFECT_LEDGER_API_KEY"], owner="example"
    ) as ledger:
        effects = list(ledger.iter_journal(run_id))
    ok = True
    for tool, variable, noun in CHECKED:
        mine = [e for e in effects if e.tool == tool]
        confirmed = [e for e in mine if e.status == "confirmed"]
        done = at_provider(os.environ[variable], {e.idempotency_key for e in mine})
        print(f"{noun} at the provider: {done} · effects in the ledger: {len(confirmed)}")
        ok = ok and done == len(confirmed) == len(mine) == 1
    return ok
