"""A guarded charge whose confirmation is written behind (`ledger_client.behind`), then:

    python confirms_behind.py RUN_ID ACCOUNT exit     # the script ends as soon as it returns
    python confirms_behind.py RUN_ID ACCOUNT killed   # SIGKILLed once the tool has returned,
                                                      # its confirmation still on the way

In `killed`, the confirmation's request is held back (the reporter's sending waits forever),
as a slow network would hold it, so that the kill lands in the window between the tool's
return and the ledger's answer every time. The charge's id is printed before the end.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import httpx
from ledger_client import bind_position, current_effect, guarded
from ledger_client.config import default_config


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
    return response.json()


if __name__ == "__main__":
    run_id, account, how = sys.argv[1:4]
    if how == "killed":
        default_config().sync().transport.behind._send = lambda call: threading.Event().wait()
    with bind_position(run_id, "turn-1"):
        charge = pay(account, "25.00")
    print(charge["id"], flush=True)
    if how == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
