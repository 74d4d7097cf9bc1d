"""A DBOS workflow that pays through the ledger, for tests/adapters/test_dbos.py.

    python dbos_pay.py run <workflow id> <amount> <sync|async>
    python dbos_pay.py recover <workflow id>

`run` launches DBOS and runs the workflow `pay` (sync) or `pay_async` under the given id;
`recover` launches DBOS, which recovers this executor's pending workflows, and waits for the
given one. Either prints `RESULT <json>` with the workflow's result, or `ERROR <type>: ...`
and exits 1.

Environment: the stage's (EFFECT_LEDGER_URL, EFFECT_LEDGER_API_KEY, SANDBOX_PAYMENTS_URL),
plus DBOS_SYSTEM_DATABASE_URL and DBOS_TEST_RUN, the executor id and application version of
one test's processes (DBOS 3.4 hands a dead executor's workflows to any live executor of the
same version: no other test's process may take them); DBOS_TEST_CALLS names a file that gets a
line each time the step's body runs; DBOS_TEST_CRASH=after-charge SIGKILLs the process as soon
as the sandbox has answered the charge, before the guard can report the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import httpx
from dbos import DBOS, DBOSConfig, SetWorkflowID
from ledger_client import current_effect
from ledger_client.adapters.dbos import ledger_step

PAYMENTS = os.environ["SANDBOX_PAYMENTS_URL"]


def body_ran(amount: str) -> None:
    with open(os.environ["DBOS_TEST_CALLS"], "a", encoding="utf-8") as calls:
        calls.write(f"{os.getpid()} {amount}\n")


def after_charge() -> None:
    if os.environ.get("DBOS_TEST_CRASH") == "after-charge":
        os.kill(os.getpid(), signal.SIGKILL)


def charge_body(amount: str, currency: str, account: str) -> dict[str, str]:
    return {"amount": amount, "currency": currency, "account": account}


@ledger_step(tool="charge_card", target="{account}")
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    body_ran(amount)
    key = current_effect().idempotency_key
    answer = httpx.post(
        f"{PAYMENTS}/charges",
        json=charge_body(amount, currency, account),
        headers={"Idempotency-Key": key},
        timeout=10,
    )
    answer.raise_for_status()
    after_charge()
    return dict(answer.json())


@ledger_step(tool="charge_card", target="{account}")
async def charge_card_async(amount: str, currency: str, account: str) -> dict[str, Any]:
    body_ran(amount)
    key = current_effect().idempotency_key
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(
            f"{PAYMENTS}/charges",
            json=charge_body(amount, currency, account),
            headers={"Idempotency-Key": key},
        )
    answer.raise_for_status()
    after_charge()
    return dict(answer.json())


@DBOS.workflow()
def pay(amount: str) -> dict[str, Any]:
    return charge_card(amount, "EUR", "acct_1")


@DBOS.workflow()
async def pay_async(amount: str) -> dict[str, Any]:
    return await charge_card_async(amount, "EUR", "acct_1")


def launch() -> None:
    config: DBOSConfig = {
        "name": "ledger-adapter-test",
        "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"],
        "executor_id": os.environ["DBOS_TEST_RUN"],
        "application_version": os.environ["DBOS_TEST_RUN"],
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()


def main(argv: list[str]) -> int:
    command, workflow_id = argv[0], argv[1]
    launch()
    try:
        if command == "run":
            amount, flavour = argv[2], argv[3]
            with SetWorkflowID(workflow_id):
                result = asyncio.run(pay_async(amount)) if flavour == "async" else pay(amount)
        else:
            result = DBOS.retrieve_workflow(workflow_id).get_result()
    except Exception as exc:  # reported to the test, which asserts on it
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
        return 1
    finally:
        DBOS.destroy()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
