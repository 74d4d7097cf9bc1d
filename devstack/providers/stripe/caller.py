"""What the crash test sends to Stripe (the payments sandbox's Stripe face), through the official
`stripe` SDK: one PaymentIntent per claimed effect, created and confirmed at once with a test
card, the effect's idempotency key as Stripe's `Idempotency-Key` and the effect's identity in
its metadata (`ledger_key`, `ledger_effect`, `ledger_target`).

`send` answers with the outcome the worker reports: confirmed with the PaymentIntent's id once
it succeeded, failed on a refusal Stripe documents as final (a declined card, an invalid
request), and unknown for everything else (a lost answer, a timeout, a 5xx): recovery asks
Stripe by the metadata. `records` counts the PaymentIntents per key in the sandbox's store.
It speaks only HTTP and never imports Django.
"""

from __future__ import annotations

import os
from collections import Counter
from decimal import Decimal
from typing import Any

import httpx

API_KEY_ENV = "STRIPE_TEST_SECRET_KEY"
API_KEY = "sk_test_sandbox_crashtest"  # the sandbox takes any sk_test_ key
TIMEOUT = 2.0  # seconds: under the tool's call_timeout
# The crash test's fake is the payments sandbox (its Stripe face), holding this key's variable.
FAKE = "payments"
ENV = {API_KEY_ENV: API_KEY}
ZERO_DECIMAL = {"BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX"}

# The crash test's tool for this provider, as a tools.toml table.
TOOL: dict[str, Any] = {
    "preset": "idempotent",
    "description": "Charge a card through Stripe (PaymentIntents, confirmed at once)",
    "mode": "test",
    "has_lookup": True,
    "key_ttl": "24h",
    "lookup_proves_absence": True,
    "lookup_horizon": "30d",
    "call_timeout": "2s",
    "settle_after": "3s",
    "reconciler": "stripe",
    "reconciler_config": {"base_url": "{provider_url}", "api_key_env": {"test": API_KEY_ENV}},
    "webhook_provider": "stripe",
    "amount_path": "amount",
    "currency_path": "currency",
    "amount_unit": "major",
}


def client(provider_url: str) -> Any:
    import requests
    import stripe

    session = requests.Session()
    session.trust_env = False  # the sandbox is on loopback: no proxies from the environment
    return stripe.StripeClient(
        os.environ.get(API_KEY_ENV) or API_KEY,
        base_addresses={"api": provider_url.rstrip("/")},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=TIMEOUT, session=session),
    )


def warm(provider_url: str) -> None:
    """The SDK loaded and a client built: what `send` needs, before forking."""
    client(provider_url)


def minor(amount: Any, currency: str) -> int:
    places = 0 if currency.upper() in ZERO_DECIMAL else 2
    return int(Decimal(str(amount)).scaleb(places))


def params(effect: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    currency = str(request.get("currency") or "EUR")
    return {
        "amount": minor(request["amount"], currency),
        "currency": currency.lower(),
        "confirm": True,
        "payment_method": str(request.get("payment_method") or "pm_card_visa"),
        "metadata": {
            "ledger_key": effect["idempotency_key"],
            "ledger_effect": str(effect["id"]),
            "ledger_target": str(effect.get("target") or request.get("account") or ""),
        },
    }


def send(provider_url: str, effect: dict[str, Any], request: dict[str, Any], fault: str) -> dict:
    """Charge the effect's amount once; `fault` ("", "hang=1", "drop") is applied by the sandbox
    to this one call. Returns {"status", "provider_ref", "response"} for POST /outcome."""
    import stripe

    options: dict[str, Any] = {"idempotency_key": effect["idempotency_key"]}
    if fault:
        options["headers"] = {"X-Sandbox-Fault": fault}
    try:
        intent = client(provider_url).v1.payment_intents.create(
            params=params(effect, request), options=options
        )
    except stripe.CardError as error:
        failed = error.json_body if isinstance(error.json_body, dict) else {}
        return {"status": "failed", "provider_ref": "", "response": failed}
    except stripe.InvalidRequestError as error:
        # Refused as invalid (never a 429: that is a RateLimitError): nothing was charged.
        return {"status": "failed", "provider_ref": "", "response": {"error": str(error)[:300]}}
    except stripe.StripeError as error:
        # A lost answer, a timeout, a 5xx, a 429, a key reused: the charge may exist.
        return _unknown(error)
    if intent.status != "succeeded":
        said = {"status": intent.status}
        return {"status": "unknown", "provider_ref": intent.id, "response": said}
    return {
        "status": "confirmed",
        "provider_ref": intent.id,
        "response": {"id": intent.id, "status": intent.status, "amount_minor": intent.amount},
    }


def _unknown(error: Any) -> dict:
    return {
        "status": "unknown",
        "provider_ref": "",
        "response": {"error": type(error).__name__, "status": error.http_status},
    }


def records(provider_url: str) -> dict[str, int]:
    """How many PaymentIntents the sandbox holds per effect idempotency key."""
    answer = httpx.get(
        f"{provider_url.rstrip('/')}/_sandbox/stripe/objects",
        params={"object": "payment_intent"},
        timeout=10,
        trust_env=False,
    )
    answer.raise_for_status()
    keys = (item["metadata"].get("ledger_key") for item in answer.json()["data"])
    return dict(Counter(key for key in keys if key))
