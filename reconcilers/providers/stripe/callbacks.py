"""Stripe's webhooks at `POST /api/v1/callbacks/stripe`, checked as Stripe signs them.

Stripe sends `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, each v1 an HMAC-SHA256 of
"<t>.<raw body>" under an endpoint's signing secret (`whsec_…`); while a secret is rolled,
Stripe signs with both and the header carries two v1 values. The ledger holds the provider's
secrets in LEDGER_WEBHOOK_SECRETS (`stripe:whsec_…`, and the old one in
LEDGER_WEBHOOK_OLD_SECRETS while it rotates); each is tried with the SDK's own check
(`stripe.WebhookSignature.verify_header`, tolerance 300 s, the SDK's default). A delivery is
known by the signature that verified: the same signature presented again is a replay.

What an event settles (the effect found by the `metadata[ledger_key]` its object carried):

| event                                          | settles the effect as                     |
| ---------------------------------------------- | ----------------------------------------- |
| `payment_intent.succeeded`                     | confirmed                                 |
| `payment_intent.payment_failed`, `…canceled`   | failed                                    |
| `refund.created`, `refund.updated`             | by the refund's status: succeeded →       |
|                                                | confirmed, failed or canceled → failed,   |
|                                                | pending → nothing yet                     |
| `refund.failed`                                | failed                                    |

Every other event (and an object without our key) settles nothing and is answered 200. An
event's `livemode` must match the mode of the effect's tool: a test-mode event never settles a
live tool's effect (nor the reverse); it is ignored and logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from reconcilers.providers.callbacks import CallbackRefused, CallbackRequest, Settlement
from reconcilers.providers.stripe.calls import in_ledger_terms, settles_as, shape_problem

TOLERANCE = 300
_FAILED = {"payment_intent.payment_failed": "failed", "payment_intent.canceled": "failed"}
_BY_STATUS = {"refund.created", "refund.updated", "refund.failed", "payment_intent.succeeded"}


class StripeCallbacks:
    name = "stripe"

    def verify(self, request: CallbackRequest) -> str:
        import stripe

        header = request.headers.get("stripe-signature", "")
        if not header:
            raise CallbackRefused("No Stripe-Signature header.")
        try:
            payload = request.body.decode()
        except UnicodeDecodeError:
            raise CallbackRefused("The body is not UTF-8 text.") from None
        for secret in request.secrets:
            try:
                stripe.WebhookSignature.verify_header(payload, header, secret, TOLERANCE)
            except stripe.SignatureVerificationError as exc:
                if "tolerance" in str(exc):
                    raise CallbackRefused("The signature's timestamp is too old.") from None
                continue
            return _verified(header, payload, secret)
        raise CallbackRefused("No Stripe-Signature v1 value matches a signing secret.")

    def settlements(self, body: bytes) -> list[Settlement]:
        try:
            event = json.loads(body)
        except ValueError:
            raise ValueError("the body is not JSON") from None
        if not isinstance(event, dict) or event.get("object") != "event":
            raise ValueError("the body is not a Stripe event")
        kind = event.get("type")
        data = event.get("data")
        item = data.get("object") if isinstance(data, dict) else None
        if not isinstance(kind, str) or not isinstance(item, dict):
            raise ValueError("the event has no type or no data.object")
        if kind not in _FAILED and kind not in _BY_STATUS:
            return []
        expected = "refund" if kind.startswith("refund.") else "payment_intent"
        problem = shape_problem(item, expected)
        if problem:
            raise ValueError(f"the event's {expected}: {problem}")
        key = item["metadata"].get("ledger_key")
        status = _FAILED.get(kind) or settles_as(item)
        if not isinstance(key, str) or not key or status not in ("confirmed", "failed"):
            return []
        livemode = event.get("livemode")
        return [
            Settlement(
                key,
                status,
                provider_ref=item["id"],
                response=in_ledger_terms(item),
                livemode=livemode if isinstance(livemode, bool) else None,
            )
        ]


def _verified(header: str, payload: str, secret: str) -> str:
    """The v1 signature that this secret made (the SDK found it in the header): the
    delivery's identity."""
    stamp = next(part.strip()[2:] for part in header.split(",") if part.strip().startswith("t="))
    signed = f"{stamp}.{payload}".encode()
    return f"v1={hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()}"
