"""A guarded charge made under the client's default owner label (no `EFFECT_LEDGER_OWNER`),
whose process dies by SIGKILL once the provider has committed and before the outcome reaches
the ledger: the effect stays `dispatching` under a lease of `EFFECT_LEDGER_LEASE_SECONDS`.

    python dies_holding.py RUN_ID ACCOUNT AMOUNT
"""

from __future__ import annotations

import os
import signal
import sys

import httpx
from ledger_client import bind_position, current_effect, guarded


@guarded(tool="charge_card", target="{account}")
def pay(account: str, amount: str, currency: str = "EUR") -> dict:
    """Charge an account."""
    response = httpx.post(
        f"{os.environ['SANDBOX_PAYMENTS_URL']}/charges",
        json={"amount": amount, "currency": currency, "account": account},
        headers={"Idempotency-Key": current_effect().idempotency_key},
        timeout=5,
        trust_env=False,
    )
    response.raise_for_status()
    os.kill(os.getpid(), signal.SIGKILL)  # the provider committed; the ledger never hears
    return response.json()


if __name__ == "__main__":
    run_id, account, amount = sys.argv[1:4]
    with bind_position(run_id, "turn-1"):
        pay(account, amount)
