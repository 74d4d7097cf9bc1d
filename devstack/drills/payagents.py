"""Paying agents for the lost-window drills: each charges cards through one sandbox provider,
as an agent built on the ledger would, and keeps a journal of its runs outside the ledger.

A run is one charge: the intent with a claim (POST /effects, `claim: true`, a `claim_id` of its
own so a repeat is the same claim), the charge at the provider under the effect's idempotency
key, then the outcome. Every call is repeated after a 503, no answer or a lost one. An outcome
the ledger refuses (the effect is gone, or in doubt since a restore) leaves the run interrupted.

The journal is what an orchestrator keeps in a store of its own (a workflow engine's
checkpoints): every run the agent started, and what the ledger told it. After the database went
back in time the agent *replays* its journal: every run is posted again with the same run_id
and step_id, and the ledger answers from what it holds (a confirmed effect) or records the
intent afresh, which restore mode treats as possibly done already. A replayed run that is in
doubt with nothing scheduled to settle it waits for a person or a statement (`review`); the
next replay picks it up again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from devstack.crashtest.worker import charge_outcome
from devstack.drills.load import Api, Call, pause_after

LEASE_SECONDS = 5
WAIT = 0.3  # between polls of an effect recovery is deciding on
DONE = ("confirmed", "failed", "attempts_exhausted", "cancelled", "compensated")


@dataclass
class Run:
    run_id: str
    tool: str
    amount: str = "10.00"
    effect_id: str = ""
    # Writes the ledger acknowledged for this run: "intent", "claim", "outcome".
    acked: list[str] = field(default_factory=list)
    told_confirmed: bool = False  # an outcome `confirmed` was acknowledged
    charges_sent: int = 0
    state: str = "new"  # new | confirmed | failed | review | interrupted | halted | timeout

    @property
    def account(self) -> str:
        return f"acct_{self.run_id}"

    def intent(self, owner: str, claim_id: str) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "step_id": "charge",
            "tool": self.tool,
            "target": self.account,
            "request": {"amount": self.amount, "currency": "EUR"},
            "claim": True,
            "owner": owner,
            "claim_id": claim_id,
            "lease_seconds": LEASE_SECONDS,
        }


def until_answered(
    api: Api, kind: str, method: str, path: str, body: Any, give_up_at: Callable[[], float]
) -> Call | None:
    """Repeat a call until it gets an answer other than 503 or a lost one (None when time ran
    out)."""
    while time.monotonic() < give_up_at():
        call = api.call(kind, method, path, body)
        if not call.answer_lost and call.status != 503:
            return call
        time.sleep(pause_after(call))
    return None


class PayAgent:
    """One agent: runs charges through `tool`'s provider, one after another, on a thread."""

    def __init__(self, name: str, tool: str, provider_url: str, api: Api) -> None:
        self.name, self.tool, self.api = name, tool, api
        self.provider = httpx.Client(base_url=provider_url, timeout=5.0, trust_env=False)
        self.journal: list[Run] = []
        self.give_up_at = float("inf")

    def _deadline(self) -> float:
        return self.give_up_at

    def charge(self, run: Run, effect: dict[str, Any]) -> None:
        """Charge at the provider under the effect's key and report what came back."""
        path = f"/effects/{effect['id']}/outcome"
        token = effect["lease_token"]
        body = {"amount": run.amount, "currency": "EUR", "account": run.account}
        headers = {"Idempotency-Key": effect["idempotency_key"]}
        run.charges_sent += 1
        try:
            reply = self.provider.post("/charges", json=body, headers=headers)
        except httpx.HTTPError as exc:
            outcome = {"lease_token": token, "status": "unknown", "error": type(exc).__name__}
        else:
            outcome = charge_outcome(token, reply)
        answer = until_answered(self.api, "outcome", "POST", path, outcome, self._deadline)
        if answer is not None and answer.status == 200:
            run.acked.append("outcome")
            run.told_confirmed = run.told_confirmed or outcome["status"] == "confirmed"
        else:
            # The ledger no longer holds this claim (a restore took it, or put it in doubt).
            run.state = "interrupted"

    def step(self, run: Run) -> str:
        """Carry `run` as far as it goes now; returns its state."""
        claim_id = f"{self.name}-{uuid.uuid4()}"
        while time.monotonic() < self.give_up_at:
            answer = until_answered(
                self.api, "intent", "POST", "/effects", run.intent(self.name, claim_id),
                self._deadline,
            )  # fmt: skip
            if answer is None or answer.body is None:
                break
            effect = answer.body
            if answer.status == 409 and effect.get("error") == "halted":
                return "halted"
            if answer.status not in (200, 201):
                return f"refused {answer.status} {effect.get('error')}"
            run.effect_id = str(effect["id"])
            run.acked.append("intent")
            if effect.get("lease_token"):
                run.acked.append("claim")
                run.state = "new"
                self.charge(run, effect)
                if run.state == "interrupted":
                    return run.state
                claim_id = f"{self.name}-{uuid.uuid4()}"
                continue
            status = str(effect.get("status"))
            if status in DONE:
                return status
            if status == "unknown" and self._in_review(run):
                return "review"
            time.sleep(WAIT)  # dispatching under an old lease, unknown and being looked up
        return "timeout"

    def _in_review(self, run: Run) -> bool:
        """In doubt with no check scheduled: a person or a statement settles it."""
        plan = until_answered(
            self.api, "recovery", "POST", "/recovery", {"run_id": run.run_id, "dry_run": True},
            self._deadline,
        )  # fmt: skip
        items = (plan.body or {}).get("effects", []) if plan else []
        return any(item.get("action") == "review" for item in items)

    def new_runs(self, stopping: threading.Event, prefix: str) -> None:
        """Start runs one after another until `stopping` is set."""
        n = 0
        while not stopping.is_set():
            run = Run(f"{prefix}-{self.name}-{n:05d}", self.tool)
            self.journal.append(run)
            run.state = self.step(run)
            n += 1

    def replay(self, only: tuple[str, ...] = ()) -> None:
        """Post every journaled run again (or only those in states `only`)."""
        for run in self.journal:
            if not only or run.state in only:
                run.state = self.step(run)

    def close(self) -> None:
        self.provider.close()
        self.api.close()


def on_threads(agents: list[PayAgent], work: Callable[[PayAgent], None]) -> list[threading.Thread]:
    threads = [threading.Thread(target=work, args=(agent,), daemon=True) for agent in agents]
    for thread in threads:
        thread.start()
    return threads
