"""Refunds the ledger sends to Stripe itself (an operator's refund, a compensation).

The effect's request names what it undoes and how much, in the ledger's terms: `charge` (the
PaymentIntent `pi_…` the charge effect recorded as its provider_ref, or a charge `ch_…`),
`amount` in major units (the whole remainder when absent), optionally `currency` and `reason`.
It goes out as `POST /v1/refunds` with `payment_intent` (or `charge`), the amount in Stripe's
minor units, the effect's identity in `metadata`, and the effect's idempotency key as
`Idempotency-Key`.

What Stripe's answer means, as an outcome: a refund that succeeded is confirmed, one pending is
awaiting confirmation (its `refund.updated` event settles it), one failed is failed; a 4xx
refusal did nothing (failed), except a 429, a key Stripe refused to authenticate or permit,
which leave nothing done and the refund to try later (not_sent); a 400 `idempotency_error`
means our key already carries another request (unknown: a lookup looks); a 5xx, a timeout or
an answer that cannot be read may have done it (unknown).
"""

from __future__ import annotations

from typing import Any

from ledger.models import Effect
from reconcilers.providers.outcomes import Sent
from reconcilers.providers.stripe import calls

_OUTCOME = {"confirmed": "confirmed", "failed": "failed", "pending": "awaiting_confirmation"}
_REASONS = {"duplicate", "fraudulent", "requested_by_customer"}


def refund(sdk: Any, effect: Effect) -> Sent:
    import stripe

    request = effect.request if isinstance(effect.request, dict) else {}
    try:
        params = _params(sdk, effect, request)
    except ValueError as exc:
        return Sent("failed", error={"detail": str(exc)[:500]})
    except stripe.StripeError as exc:
        # Reading the PaymentIntent's currency failed: nothing was sent.
        return Sent("not_sent", error={"detail": calls.failure(exc).detail})
    try:
        answer = sdk.v1.refunds.create(
            params=params, options={"idempotency_key": effect.idempotency_key}
        )
    except stripe.StripeError as exc:
        return _refused(exc)
    except Exception as exc:  # an answer the SDK could not turn into a Refund
        return Sent("unknown", error={"detail": f"unreadable answer ({type(exc).__name__})"})
    body = getattr(getattr(answer, "last_response", None), "data", None)
    if calls.shape_problem(body, "refund"):
        return Sent("unknown", response=body if isinstance(body, dict) else None)
    outcome = _OUTCOME.get(calls.settles_as(body))
    if outcome is None:
        return Sent("unknown", response=body)
    return Sent(outcome, provider_ref=body["id"], response=body)


def _params(sdk: Any, effect: Effect, request: dict[str, Any]) -> dict[str, Any]:
    undone = request.get("charge")
    if not isinstance(undone, str) or not undone.startswith(("pi_", "ch_")):
        raise ValueError(
            "a Stripe refund names the PaymentIntent (pi_…) or charge (ch_…) it undoes"
        )
    params: dict[str, Any] = {
        "payment_intent" if undone.startswith("pi_") else "charge": undone,
        "metadata": {"ledger_key": effect.idempotency_key, "ledger_effect": str(effect.id)},
    }
    if request.get("amount") is not None:
        currency = request.get("currency")
        if not isinstance(currency, str):
            currency = _currency_of(sdk, undone)
        params["amount"] = calls.to_minor(request["amount"], currency)
    reason = request.get("reason")
    if reason in _REASONS:
        params["reason"] = reason
    return params


def _currency_of(sdk: Any, undone: str) -> str:
    """The currency of what is refunded, when the request does not say it."""
    found = (
        sdk.v1.payment_intents.retrieve(undone)
        if undone.startswith("pi_")
        else sdk.v1.charges.retrieve(undone)
    )
    currency = getattr(found, "currency", None)
    if not isinstance(currency, str):
        raise ValueError(f"{undone} has no currency")
    return currency


def _refused(exc: Any) -> Sent:
    import stripe

    detail = calls.failure(exc).detail
    if isinstance(exc, stripe.APIConnectionError | stripe.APIError):
        return Sent("unknown", error={"detail": detail})
    if isinstance(exc, stripe.IdempotencyError):
        return Sent("unknown", error={"detail": detail})
    if isinstance(exc, stripe.RateLimitError | stripe.AuthenticationError | stripe.PermissionError):
        return Sent("not_sent", error={"detail": detail})
    if exc.http_status is not None and 400 <= exc.http_status < 500:
        return Sent("failed", error={"detail": detail, "body": exc.json_body})
    return Sent("unknown", error={"detail": detail})
