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

from ledger_client import bind_position, guarded
from ledger_client.config import default_config

from tests.adapters.agents import crash_points


@guarded(tool="charge_card", target="{account}")
def pay(account: str, amount: str, currency: str = "EUR") -> dict:
    """Charge an account."""
    return crash_points.charge(amount, currency, account, kill_p=0.0)


if __name__ == "__main__":
    run_id, account, how = sys.argv[1:4]
    if how == "killed":
        default_config().sync().transport.behind._send = lambda call: threading.Event().wait()
    with bind_position(run_id, "turn-1"):
        charge = pay(account, "25.00")
    print(charge["id"], flush=True)
    if how == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
