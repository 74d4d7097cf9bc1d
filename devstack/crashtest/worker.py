"""A payment workflow worker for the crash test: an agent that records intent, charges through
the provider with the effect's idempotency key, and reports the outcome, and that kills itself
with SIGKILL at the crash points its plan names.

    python -m devstack.crashtest.worker PLAN.json NAME

It speaks only HTTP (the agent API and the provider, or a real provider's official SDK against
its fake: `devstack.crashtest.callers`), never imports Django, and keeps nothing in memory that
matters: a restarted worker calls POST /recovery and carries on. Every call to
the ledger is retried until it answers (the web process may be killed too); the API is
idempotent and a repeated claim with the same `claim_id` returns the same lease.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from devstack.crashtest import callers

# Where a worker can die, in the order a workflow passes them.
BEFORE_SEND = "before_send"  # claimed, nothing sent
DURING_CALL = "during_call"  # the provider has the request and is still working on it
AFTER_SEND = "after_send"  # the provider committed, the response was lost on the way back
BEFORE_PERSIST = "before_persist"  # the response arrived, the outcome was never recorded
WORKER_POINTS = (BEFORE_SEND, DURING_CALL, AFTER_SEND, BEFORE_PERSIST)

LEASE_SECONDS = 2
WAIT = 0.3  # between polls of an effect someone else is resolving


def die(marker: Path) -> None:
    """Record that this crash happened (durably, so a restart does not crash here again), then
    SIGKILL ourselves: no cleanup, no flushing, as a real crash."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    with open(marker, "w") as handle:
        handle.write(str(time.time()))
        handle.flush()
        os.fsync(handle.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


class Worker:
    def __init__(self, plan: dict[str, Any], name: str) -> None:
        self.plan = plan
        self.name = name
        self.crashed = Path(plan["crash_dir"])
        # The web instances, this worker's own first: the workers are spread across them.
        ledgers: list[str] = plan["ledgers"]
        first = sorted(plan["workers"]).index(name) % len(ledgers)
        self.ledgers = [
            httpx.Client(
                base_url=url,
                headers={"Authorization": f"Bearer {plan['key']}"},
                timeout=10.0,
                trust_env=False,
            )
            for url in ledgers[first:] + ledgers[:first]
        ]
        # No call outlasts the tool's call_timeout: a complete lookup's proof of absence counts
        # on it (`ledger.rules.lookup_absence`).
        self.provider = httpx.Client(
            base_url=plan["provider"], timeout=plan["provider_timeout"], trust_env=False
        )
        # A real provider's API, through its caller (`devstack.crashtest.callers`).
        self.caller = callers.load(plan["via"]) if plan.get("via") else None
        self.tool = plan.get("tool", "charge_card")
        # Retried calls stop when the process that started us is gone.
        self.conductor = os.getppid()

    # --- the ledger, retried until it answers ----------------------------------------------

    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        delay = 0.1
        while True:
            if os.getppid() != self.conductor:
                sys.exit("the crash test's conductor is gone")
            try:
                response = self.ledgers[0].request(method, path, json=body)
            except httpx.TransportError:
                # That instance is down or restarting: the next one, as a load balancer would.
                self.ledgers.append(self.ledgers.pop(0))
                response = None
            if response is not None and response.status_code < 500:
                return response
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    # --- crash points ---------------------------------------------------------------------

    def crash_due(self, workflow: dict[str, Any], point: str) -> Path | None:
        if point not in workflow["crashes"]:
            return None
        marker = self.crashed / f"{workflow['run_id']}.{point}"
        return None if marker.exists() else marker

    # --- one workflow ---------------------------------------------------------------------

    def run(self, workflow: dict[str, Any]) -> None:
        claim_id = f"{self.name}-{uuid.uuid4()}"  # one per attempt; reused on retries
        while True:
            response = self.call(
                "POST",
                "/effects",
                {
                    "run_id": workflow["run_id"],
                    "step_id": "charge",
                    "tool": self.tool,
                    "target": workflow["account"],
                    "request": self.request(workflow),
                    "claim": True,
                    "owner": self.name,
                    "claim_id": claim_id,
                    "lease_seconds": LEASE_SECONDS,
                },
            )
            effect = response.json()
            if response.status_code in (200, 201) and effect.get("lease_token"):
                if self.caller is not None:
                    self.send(workflow, effect)
                else:
                    self.charge(workflow, effect)
                claim_id = f"{self.name}-{uuid.uuid4()}"
                continue
            status = effect.get("status") or effect.get("error")
            if status in ("confirmed", "failed", "attempts_exhausted", "cancelled"):
                return
            if status == "unknown" and self.in_review(workflow):
                return
            # Dispatching under an old lease, unknown, awaiting: recovery is deciding.
            time.sleep(WAIT)

    def request(self, workflow: dict[str, Any]) -> dict[str, Any]:
        if self.caller is None:
            return {"amount": workflow["amount"], "currency": "EUR"}
        return callers.request_for(self.caller, workflow)

    def in_review(self, workflow: dict[str, Any]) -> bool:
        """An unknown effect nothing will resolve without a person: no check is scheduled."""
        plan = self.call("POST", "/recovery", {"run_id": workflow["run_id"], "dry_run": True})
        items = plan.json().get("effects", [])
        return any(item["action"] == "review" for item in items)

    def charge(self, workflow: dict[str, Any], effect: dict[str, Any]) -> None:
        path = f"/effects/{effect['id']}/outcome"
        token = effect["lease_token"]
        if marker := self.crash_due(workflow, BEFORE_SEND):
            die(marker)
        headers = {"Idempotency-Key": effect["idempotency_key"]}
        if marker := self.crash_due(workflow, DURING_CALL):
            # The provider holds the request for a second and then commits; we die meanwhile.
            headers["X-Sandbox-Fault"] = "hang=1"
            threading.Timer(0.3, die, args=(marker,)).start()
        after_send = self.crash_due(workflow, AFTER_SEND)
        if after_send:
            headers["X-Sandbox-Fault"] = "drop"
        body = {"amount": workflow["amount"], "currency": "EUR", "account": workflow["account"]}
        try:
            reply = self.provider.post("/charges", json=body, headers=headers)
        except httpx.HTTPError as exc:
            if after_send:
                die(after_send)
            # A lost response is unknown, never failed: recovery asks the provider.
            self.call("POST", path, {"lease_token": token, "status": "unknown", "error": str(exc)})
            return
        if marker := self.crash_due(workflow, BEFORE_PERSIST):
            die(marker)
        self.call("POST", path, charge_outcome(token, reply))

    def send(self, workflow: dict[str, Any], effect: dict[str, Any]) -> None:
        """The call through a real provider's SDK, with the same crash points: the fake
        holds the request (`hang=1`) while we die, or commits and drops the answer."""
        assert self.caller is not None
        if marker := self.crash_due(workflow, BEFORE_SEND):
            die(marker)
        fault = ""
        if marker := self.crash_due(workflow, DURING_CALL):
            fault = "hang=1"
            threading.Timer(0.3, die, args=(marker,)).start()
        after_send = self.crash_due(workflow, AFTER_SEND)
        if after_send:
            fault = "drop"
        outcome = self.caller.send(self.plan["provider"], effect, self.request(workflow), fault)
        if after_send:
            die(after_send)
        if marker := self.crash_due(workflow, BEFORE_PERSIST):
            die(marker)
        body = {"lease_token": effect["lease_token"], **outcome}
        self.call("POST", f"/effects/{effect['id']}/outcome", body)


def charge_outcome(token: str, reply: httpx.Response) -> dict[str, Any]:
    """The outcome to report for the provider's answer to a charge: confirmed with its id, a
    5xx unknown (it may have been done), any other refusal failed."""
    if reply.status_code in (200, 201):
        charge = reply.json()
        return {
            "lease_token": token,
            "status": "confirmed",
            "provider_ref": charge["id"],
            "response": charge,
        }
    status = "unknown" if reply.status_code >= 500 else "failed"
    return {"lease_token": token, "status": status, "error": reply.text[:500]}


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[0]).read_text())
    name = argv[1]
    worker = Worker(plan, name)
    # A restarted worker first asks what it left behind; the ledger starts reconciling it.
    worker.call("POST", "/recovery", {"owner": name})
    for workflow in plan["workers"][name]:
        worker.run(workflow)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
