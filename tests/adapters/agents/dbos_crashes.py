"""The DBOS workflows of the crash matrix (tests/adapters/test_dbos_crashes.py, `make
crashtest-frameworks`): payments, one workflow each, whose charge is a `ledger_step` as
docs/frameworks/dbos.md shows (dbos 3.4), on DBOS's PostgreSQL system database.

    python tests/adapters/agents/dbos_crashes.py FIRST COUNT

Launches DBOS, which recovers the workflows this executor left pending when it was killed (its
own recovery, from the system database: the step that was running runs again under the same
step id), enqueues those of payments FIRST … FIRST+COUNT-1 (workflow `pay-<i>`, account
`acct_<i>`) that DBOS has never seen on a queue that runs four at a time on this executor, and
waits for every one. With
DBOS_KILL_P=p the process SIGKILLs itself, with probability p at each place, before the charge
is sent, while it is in flight, and after the provider answered (before the guard records the
outcome). Prints `DONE <workflow>` as each ends.

Environment: the stage's, DBOS_SYSTEM_DATABASE_URL, and DBOS_TEST_RUN, the executor id and
application version of one corner's processes. DBOS_IDENTITY=call_id is the control: the step
is named by an id drawn afresh each time it runs instead of DBOS's step id, as a call id that
does not survive the crash (the matrix must then find double charges).
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from ledger_client.adapters.dbos import ledger_step
from ledger_client.errors import LedgerClientError

from tests.adapters.agents import crash_points

KILL_P = float(os.environ.get("DBOS_KILL_P", "0"))


@ledger_step(tool="charge_card", target="{account}")
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    return crash_points.charge(amount, currency, account, KILL_P)


@DBOS.workflow()
def crash_pay(index: int) -> dict[str, Any]:
    """The workflow's answer is what it learnt of its charge: the charge, or the refusal."""
    try:
        charge = charge_card(f"{index + 1}.00", "EUR", f"acct_{index}")
    except LedgerClientError as refused:
        return {"ok": False, "told": f"{type(refused).__name__}: {refused}"}
    return {"ok": True, "told": str(charge)}


def launch() -> None:
    config: DBOSConfig = {
        "name": "ledger-crash-matrix",
        "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"],
        "executor_id": os.environ["DBOS_TEST_RUN"],
        "application_version": os.environ["DBOS_TEST_RUN"],
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's pending workflows, each in a thread of its own


def _identity_by_a_fresh_id() -> None:
    """DBOS_IDENTITY=call_id: the control, named by an id that changes at every run."""
    import ledger_client.adapters.dbos as adapter

    adapter.step_identity = lambda: (DBOS.workflow_id or "", uuid.uuid4().hex)  # type: ignore


def main(first: str, count: str) -> None:
    if os.environ.get("DBOS_IDENTITY") == "call_id":
        _identity_by_a_fresh_id()
    launch()
    # Four at a time on this executor, recovered workflows included (DBOS re-enqueues a
    # pending workflow on the queue it came from).
    queue = DBOS.register_queue("payments", worker_concurrency=4, polling_interval_sec=0.1)
    ids = [f"pay-{i}" for i in range(int(first), int(first) + int(count))]
    for index, workflow_id in enumerate(ids, int(first)):
        if DBOS.get_workflow_status(workflow_id) is None:
            with SetWorkflowID(workflow_id):
                queue.enqueue(crash_pay, index)
    for workflow_id in ids:
        DBOS.retrieve_workflow(workflow_id).get_result()
        print("DONE", workflow_id, flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:3])
