"""A DBOS workflow that pays and sends a receipt, each side effect a DBOS step guarded by the
ledger (`ledger_step`).

Offline, no model and no API key: the workflow charges a card at the payments sandbox, then
emails the receipt through the messaging sandbox. Then DBOS's record of the workflow is deleted
(as its garbage collection does, or a restore of the system database from an older backup) and
the same workflow id is run again: DBOS has nothing checkpointed, so it runs both steps again,
under the same workflow and step ids, and the ledger answers with what it recorded instead of
charging or sending twice. It ends by counting what the providers did against what the ledger
recorded, and exits non-zero if they differ.

    EFFECT_LEDGER_URL=... EFFECT_LEDGER_API_KEY=... \\
    SANDBOX_PAYMENTS_URL=... SANDBOX_MESSAGING_URL=... \\
    [DBOS_SYSTEM_DATABASE_URL=postgresql://...] python examples/dbos/agent.py

DBOS_SYSTEM_DATABASE_URL is DBOS's own system database (a PostgreSQL URL, or sqlite:///file);
unset, it is a SQLite file in a temporary directory. Written against dbos 3.4.0.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx
from dbos import DBOS, DBOSConfig, SetWorkflowID
from ledger_client import current_effect
from ledger_client.adapters.dbos import ledger_step

# The closing check every example shares (examples/ledger_counts.py, beside this directory).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ledger_counts import counts_agree
from stripe_payments import charge


@ledger_step(tool="charge_card", target="{account}")
def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
    """Charge `amount` (major units, such as "25.00") in `currency` to `account`'s card."""
    effect = current_effect()
    return charge(amount, currency, account, effect.idempotency_key, str(effect.id))


@ledger_step(tool="send_email", target="{to}")
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Email `to`. The messaging provider ignores keys: the header only lets us count ours."""
    reply = httpx.post(
        f"{os.environ['SANDBOX_MESSAGING_URL']}/messages",
        json={"to": to, "subject": subject, "body": body},
        headers={"Idempotency-Key": current_effect().idempotency_key},
    )
    reply.raise_for_status()
    message: dict[str, Any] = reply.json()
    return message


@DBOS.workflow()
def checkout(amount: str, account: str, email: str) -> dict[str, str]:
    charge = charge_card(amount, "EUR", account)
    receipt = send_email(
        email, "Your receipt", f"We charged {amount} EUR to your card (charge {charge['id']})."
    )
    return {"charge": charge["id"], "message": receipt["id"]}


def run(workflow_id: str) -> tuple[dict[str, str], dict[str, str]]:
    """The workflow, then the same workflow id again once DBOS no longer knows it."""
    with SetWorkflowID(workflow_id):
        first = checkout("25.00", "acct_42", "customer@example.com")
    print(f"workflow {workflow_id}: {first}")
    DBOS.delete_workflow(workflow_id)
    with SetWorkflowID(workflow_id):
        again = checkout("25.00", "acct_42", "customer@example.com")
    print(f"the same workflow again, DBOS's record of it deleted: {again}")
    return first, again


def main() -> int:
    workflow_id = f"example-dbos-{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory() as scratch:
        config: DBOSConfig = {
            "name": "effect-ledger-example",
            "system_database_url": os.environ.get("DBOS_SYSTEM_DATABASE_URL")
            or f"sqlite:///{scratch}/dbos.sqlite",
            "log_level": "WARNING",
        }
        DBOS(config=config)
        DBOS.launch()
        try:
            first, again = run(workflow_id)
        finally:
            DBOS.destroy()
    ok = counts_agree(workflow_id) and first == again
    print(json.dumps({"workflow": workflow_id, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # an example's failure is a non-zero exit, with the reason
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
