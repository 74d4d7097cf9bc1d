"""A multi-agent workflow through Effect Ledger, against the sandbox providers.

    planner     proposes a payment                      (effect `propose`)
    validator   approves the amount                     (effect `approve`, depends on `propose`)
    executor ×2 pay through Stripe's SDK, against the    (effect `charge`, depends on `approve`;
                payments sandbox's Stripe face; one        one owner per effect)
                claim wins, the other stands down
    fulfilment  sends the confirmation message through  (effect `notify`, depends on `charge`;
                the messaging sandbox                      `Blocked` until the charge is confirmed)

    python demo/run.py --ledger http://127.0.0.1:8000 [--run-id ID]

Agent keys come from LEDGER_PLANNER_KEY, LEDGER_VALIDATOR_KEY, LEDGER_EXECUTOR_KEY and
LEDGER_FULFILMENT_KEY, each falling back to LEDGER_AGENT_KEY (one key for every role).
Running again with the same --run-id replays: nothing is charged or sent twice.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import httpx
import stripe
from ledger_client import Blocked, Ledger, LedgerClientError, NeedsReview

ROLES = ("planner", "validator", "executor", "fulfilment")
APPROVAL_LIMIT = Decimal("100.00")
# The payments sandbox's Stripe face takes any test key (docs/providers/stripe.md).
SANDBOX_STRIPE_KEY = "sk_test_effect_ledger_sandbox"
BLOCKED_TIMEOUT = 30.0
started = time.monotonic()


def say(who: str, message: str) -> None:
    print(f"[{time.monotonic() - started:6.2f}s] {who:<11} {message}", flush=True)


class Workflow:
    """The four agents of one run, as threads sharing only effect ids."""

    def __init__(
        self, ledger_url: str, keys: dict[str, str], payments: str, messaging: str, run_id: str
    ) -> None:
        self.ledger_url = ledger_url
        self.keys = keys
        self.payments = payments
        self.messaging = messaging
        self.run_id = run_id
        self.ids: dict[str, str] = {}
        self.published = {name: threading.Event() for name in ("approve", "charge")}
        self.errors: list[str] = []

    def ledger(self, role: str, owner: str | None = None) -> Ledger:
        return Ledger(self.ledger_url, self.keys[role], owner=owner or role, lease_seconds=10)

    def publish(self, name: str, effect_id: str) -> None:
        self.ids[name] = effect_id
        self.published[name].set()

    # --- Agents ------------------------------------------------------------------------------

    def plan_and_validate(self) -> None:
        request = {"amount": "42.00", "currency": "EUR", "account": "acct_42"}
        with self.ledger("planner") as ledger:
            with ledger.effect(self.run_id, "propose", "propose_payment", "acct_42", request) as e:
                if not e.replayed:
                    e.confirm("", {"proposal": request})
            say("planner", f"proposed a payment of {request['amount']} EUR ({e.id})")
        with self.ledger("validator") as ledger:
            with ledger.effect(
                self.run_id, "approve", "approve_payment", "acct_42", request, depends_on=[e.id]
            ) as v:
                if not v.replayed:
                    if Decimal(request["amount"]) > APPROVAL_LIMIT:
                        v.fail(f"amount above the {APPROVAL_LIMIT} limit")
                        return
                    v.confirm("", {"approved": True, "limit": str(APPROVAL_LIMIT)})
            say("validator", f"approved the amount ({v.id})")
        self.publish("approve", v.id)

    def execute(self, owner: str) -> None:
        self.published["approve"].wait()
        request = {"amount": "42.00", "currency": "EUR", "account": "acct_42"}
        with self.ledger("executor", owner) as ledger:
            try:
                with ledger.effect(
                    self.run_id,
                    "charge",
                    "charge_card",
                    "acct_42",
                    request,
                    depends_on=[self.ids["approve"]],
                ) as e:
                    self.publish("charge", e.id)
                    if e.replayed:
                        say(owner, f"charge already confirmed ({e.result}); not charging again")
                        return
                    say(owner, f"claimed the charge (attempt {e.attempt}), calling Stripe")
                    try:
                        intent = self.pay(e, request)
                    except stripe.CardError as declined:
                        e.fail({"error": str(declined)[:300]})
                        return
                    except stripe.InvalidRequestError as refused:
                        e.fail({"error": str(refused)[:300]})
                        return
                    except stripe.StripeError as lost:
                        # No answer, a 5xx, a 429: the payment may exist; the ledger asks Stripe.
                        e.unknown(f"{type(lost).__name__}: {lost}"[:300])
                        return
                    e.confirm(intent.id, {"id": intent.id, "status": intent.status})
                    say(owner, f"payment {intent.id} confirmed")
            except NeedsReview as refused:
                say(owner, f"stands down: {refused}")

    def pay(self, e: Any, request: dict[str, Any]) -> Any:
        """The payment through Stripe's SDK (the payments sandbox's Stripe face here): keyed by
        the effect's idempotency key, its identity in the metadata the ledger searches by."""
        client = stripe.StripeClient(
            os.environ.get("STRIPE_TEST_SECRET_KEY", SANDBOX_STRIPE_KEY),
            base_addresses={"api": self.payments},
            max_network_retries=0,
            # Within the tool's call_timeout (10 s), so that a lease never ends mid-call.
            http_client=stripe.RequestsClient(timeout=8),
        )
        return client.v1.payment_intents.create(
            params={
                "amount": int(Decimal(request["amount"]) * 100),
                "currency": request["currency"].lower(),
                "confirm": True,
                "payment_method": "pm_card_visa",
                "metadata": {
                    "ledger_key": e.idempotency_key,
                    "ledger_effect": str(e.id),
                    "ledger_target": request["account"],
                },
            },
            # A slow provider, so that the interlock is visible.
            options={
                "idempotency_key": e.idempotency_key,
                "headers": {"X-Sandbox-Fault": "latency=1500"},
            },
        )

    def fulfil(self) -> None:
        self.published["charge"].wait()
        message = {"to": "customer@example.com", "subject": "Paid", "body": "Thank you."}
        deadline = time.monotonic() + BLOCKED_TIMEOUT
        with self.ledger("fulfilment") as ledger:
            while True:
                try:
                    with ledger.effect(
                        self.run_id,
                        "notify",
                        "send_email",
                        message["to"],
                        message,
                        depends_on=[self.ids["charge"]],
                    ) as e:
                        if e.replayed:
                            say("fulfilment", "notification already sent; not sending again")
                            return
                        with httpx.Client(
                            base_url=self.messaging, timeout=10, trust_env=False
                        ) as http:
                            answer = http.post("/messages", json=message)
                        answer.raise_for_status()
                        e.confirm(answer.json()["id"], answer.json())
                        say("fulfilment", f"sent {answer.json()['id']} to {message['to']}")
                        return
                except Blocked as blocked:
                    if time.monotonic() > deadline:
                        raise
                    waiting = ", ".join(b.status for b in blocked.blocked_by)
                    say("fulfilment", f"blocked: the payment is {waiting}; waiting")
                    time.sleep(0.5)

    # --- Running -----------------------------------------------------------------------------

    def run(self) -> int:
        agents = [
            ("planner", self.plan_and_validate),
            ("executor-1", lambda: self.execute("executor-1")),
            ("executor-2", lambda: self.execute("executor-2")),
            ("fulfilment", self.fulfil),
        ]
        threads = [
            threading.Thread(target=self._guard, args=(name, fn), name=name) for name, fn in agents
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.summary()

    def _guard(self, name: str, fn: Any) -> None:
        try:
            fn()
        except (LedgerClientError, httpx.HTTPError) as exc:
            self.errors.append(f"{name}: {exc}")
            say(name, f"error: {exc}")
            for event in self.published.values():
                event.set()

    def summary(self) -> int:
        with self.ledger("executor") as ledger:
            charge = ledger.get(self.ids["charge"]) if "charge" in self.ids else None
        print(f"\nrun {self.run_id}:")
        if charge is not None:
            print(
                f"  charge  {charge.status:<10} attempt {charge.attempt} "
                f"owner {charge.lease_owner or '-'} ref {charge.provider_ref}"
            )
        ok = not self.errors and charge is not None and charge.status == "confirmed"
        print("  result:", "ok" if ok else "; ".join(self.errors) or "incomplete")
        return 0 if ok else 1


def keys_from_env() -> dict[str, str]:
    fallback = os.environ.get("LEDGER_AGENT_KEY", "")
    keys = {role: os.environ.get(f"LEDGER_{role.upper()}_KEY", fallback) for role in ROLES}
    missing = [role for role, key in keys.items() if not key]
    if missing:
        sys.exit(
            "agent keys missing for: "
            + ", ".join(missing)
            + " (set LEDGER_<ROLE>_KEY or LEDGER_AGENT_KEY)"
        )
    return keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", default="http://127.0.0.1:8000", help="ledger base URL")
    parser.add_argument("--payments", default="http://127.0.0.1:8101", help="payments sandbox")
    parser.add_argument("--messaging", default="http://127.0.0.1:8102", help="messaging sandbox")
    parser.add_argument("--run-id", default=None, help="run id (repeat one to see replay)")
    args = parser.parse_args(argv)
    run_id = args.run_id or f"demo-{uuid.uuid4().hex[:8]}"
    workflow = Workflow(args.ledger, keys_from_env(), args.payments, args.messaging, run_id)
    return workflow.run()


if __name__ == "__main__":
    sys.exit(main())
