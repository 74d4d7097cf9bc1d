"""How every example pays: through Stripe's SDK (`stripe`), against the payments sandbox's
Stripe face in `make examples`, the guarded effect's identity on the PaymentIntent.

- the effect's idempotency key as Stripe's `Idempotency-Key`: a call made again under it (a
  retry, a resumed run) is answered with the first answer and pays nothing more;
- the same key and the effect's id in `metadata` (`ledger_key`, `ledger_effect`), the account
  in `metadata[ledger_target]`: after a crash the ledger's Stripe adapter finds the payment by
  them in Stripe's list endpoints (docs/providers/stripe.md).

SANDBOX_PAYMENTS_URL is where Stripe's API is (https://api.stripe.com for Stripe itself) and
STRIPE_TEST_SECRET_KEY the key (the sandbox takes any sk_test_ key).
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

import stripe

SANDBOX_KEY = "sk_test_effect_ledger_sandbox"


def client() -> stripe.StripeClient:
    return stripe.StripeClient(
        os.environ.get("STRIPE_TEST_SECRET_KEY", SANDBOX_KEY),
        base_addresses={"api": os.environ["SANDBOX_PAYMENTS_URL"]},
        max_network_retries=0,
        # Within the tool's call_timeout (tools.toml: 10 s); both sync and async calls.
        http_client=stripe.HTTPXClient(timeout=8, allow_sync_methods=True),
    )


def params(amount: str, currency: str, account: str, key: str, effect_id: str) -> dict[str, Any]:
    return {
        "amount": int(Decimal(amount) * 100),
        "currency": currency.lower(),
        "confirm": True,
        "payment_method": "pm_card_visa",
        "metadata": {"ledger_key": key, "ledger_effect": effect_id, "ledger_target": account},
    }


def paid(intent: Any, amount: str, currency: str, account: str) -> dict[str, Any]:
    """What the tool answers: the PaymentIntent's id and status, the amount as asked."""
    return {
        "id": intent.id,
        "status": intent.status,
        "amount": amount,
        "currency": currency,
        "account": account,
    }


def charge(amount: str, currency: str, account: str, key: str, effect_id: str = "") -> dict:
    """Pay `amount` (major units) once under the effect's key."""
    intent = client().v1.payment_intents.create(
        params=params(amount, currency, account, key, effect_id),
        options={"idempotency_key": key},
    )
    return paid(intent, amount, currency, account)


async def charge_async(
    amount: str, currency: str, account: str, key: str, effect_id: str = ""
) -> dict:
    intent = await client().v1.payment_intents.create_async(
        params=params(amount, currency, account, key, effect_id),
        options={"idempotency_key": key},
    )
    return paid(intent, amount, currency, account)
