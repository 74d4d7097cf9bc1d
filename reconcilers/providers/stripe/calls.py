"""Calls to Stripe through its SDK, and Stripe's records in the ledger's terms.

The SDK (`stripe`, imported when first called: it takes a second to load) makes every request:
a `StripeClient` per adapter, on one pooled `requests` session per process that ignores
proxies from the environment, with no retries of its own (the ledger decides when to ask
again). Anything short of a well-formed answer is a `Failure`, with a 429's `Retry-After`.

Amounts: Stripe counts in the currency's smallest unit (1099 EUR cents, 500 JPY); the ledger's
requests carry major units ("10.99"), as its limits read them. `to_major` converts with
Stripe's own decimal places: none for its zero-decimal currencies, three for its
three-decimal ones, two for every other (ISK, HUF and TWD included: Stripe's API writes them
with two).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

# docs.stripe.com/currencies: zero-decimal and three-decimal currencies.
ZERO_DECIMAL = frozenset(
    "BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF".split()  # noqa: SIM905
)
THREE_DECIMAL = frozenset({"BHD", "JOD", "KWD", "OMR", "TND"})
DEFAULT_API = "https://api.stripe.com"
KEY_PREFIXES = {"test": ("sk_test_", "rk_test_"), "live": ("sk_live_", "rk_live_")}
# The ledger's settlement of each status (PaymentIntents and Refunds).
INTENT_STATUS = {
    "succeeded": "confirmed",
    "processing": "pending",
    "requires_capture": "pending",
    "requires_action": "pending",
    "requires_confirmation": "pending",
    "canceled": "failed",
}
REFUND_STATUS = {
    "succeeded": "confirmed",
    "pending": "pending",
    "requires_action": "pending",
    "failed": "failed",
    "canceled": "failed",
}


def places(currency: str) -> int:
    code = currency.upper()
    return 0 if code in ZERO_DECIMAL else 3 if code in THREE_DECIMAL else 2


def to_major(amount: int, currency: str) -> str:
    """1099 EUR → "10.99"; 500 JPY → "500"."""
    exp = places(currency)
    return f"{Decimal(amount).scaleb(-exp):.{exp}f}"


def to_minor(amount: Any, currency: str) -> int:
    """ "10.99" EUR → 1099; `ValueError` for an amount with more places than the currency."""
    try:
        exact = Decimal(str(amount)).scaleb(places(currency))
    except ArithmeticError:
        raise ValueError(f"{amount!r} is not an amount") from None
    if not exact.is_finite() or exact != exact.to_integral_value() or exact <= 0:
        raise ValueError(f"{amount!r} is not a positive amount of {currency.upper()}")
    return int(exact)


def key_problem(key: str, mode: str, variable: str) -> str:
    """Why this key cannot be used by a tool of this mode, or ""."""
    if not key:
        return f"no Stripe key: the environment variable {variable or '(none named)'} is unset"
    wanted = KEY_PREFIXES.get(mode, KEY_PREFIXES["live"])
    if key.startswith(wanted):
        return ""
    other = "live" if mode == "test" else "test"
    said = f"a {other}-mode key" if key.startswith(KEY_PREFIXES[other]) else "not a secret key"
    return (
        f"{variable} holds {said}; a {mode} tool speaks to Stripe's {mode} mode only"
        f" ({' or '.join(p + '…' for p in wanted)})"
    )


@dataclass(frozen=True)
class Failure:
    """No usable answer: why, and when the provider asked to be asked again (seconds)."""

    detail: str
    retry_after: float | None = None


_session_lock = threading.Lock()
_session: Any = None


def _http(timeout: float) -> Any:
    """The SDK's `requests` transport on one pooled session per process (no proxies from the
    environment: the provider is called directly)."""
    global _session
    import requests
    import stripe

    with _session_lock:
        if _session is None:
            _session = requests.Session()
            _session.trust_env = False
    return stripe.RequestsClient(timeout=timeout, session=_session)


def client(key: str, base_url: str, timeout: float) -> Any:
    import stripe

    base = (base_url or DEFAULT_API).rstrip("/")
    return stripe.StripeClient(
        key,
        base_addresses={"api": base, "files": base if base_url else stripe.DEFAULT_UPLOAD_API_BASE},
        max_network_retries=0,
        http_client=_http(timeout),
    )


def failure(exc: Exception) -> Failure:
    """What a failed call says: its kind and status, and a 429's Retry-After."""
    import stripe

    if isinstance(exc, stripe.StripeError):
        status = exc.http_status
        retry = None
        if status == 429:
            header = (exc.headers or {}).get("Retry-After") or (exc.headers or {}).get(
                "retry-after"
            )
            retry = _seconds(header)
        code = f" {exc.code}" if exc.code else ""
        said = f"Stripe answered {status}{code}" if status else "no answer from Stripe"
        return Failure(f"{said} ({type(exc).__name__})", retry)
    # The SDK building objects from an answer of an unexpected shape.
    return Failure(f"Stripe's answer could not be read ({type(exc).__name__})")


def _seconds(header: str | None) -> float:
    try:
        value = float(header) if header else 1.0
    except ValueError:
        return 1.0
    return value if 0 < value <= 3600 else 1.0


def body_of(answer: Any) -> Any:
    """The JSON Stripe answered, as it came (the SDK's objects are built from it)."""
    return getattr(getattr(answer, "last_response", None), "data", None)


def page_of(answer: Any, kind: str) -> tuple[list[dict[str, Any]], bool] | Failure:
    """A list page's records and `has_more`, checked as the ledger reads them: a list object
    whose every record is a `kind` with an id, a creation time, an amount and a currency."""
    body = body_of(answer)
    if not isinstance(body, dict) or body.get("object") != "list":
        return Failure("Stripe's answer is not a list object")
    data, more = body.get("data"), body.get("has_more")
    if not isinstance(data, list) or not isinstance(more, bool):
        return Failure("Stripe's list has no data or no has_more")
    for item in data:
        problem = shape_problem(item, kind)
        if problem:
            return Failure(f"a listed record the ledger cannot read: {problem}")
    if more and not data:
        return Failure("Stripe's page says more follows but lists nothing to page after")
    return data, more


def shape_problem(item: Any, kind: str) -> str:
    if not isinstance(item, dict) or item.get("object") != kind:
        return f"not a {kind}"
    fields = {"id": str, "status": str, "currency": str, "metadata": dict}
    for name, wanted in fields.items():
        if not isinstance(item.get(name), wanted):
            return f"{name} missing or of another type"
    for name in ("amount", "created"):
        value = item.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{name} missing or not a whole number"
    return ""


def in_ledger_terms(item: dict[str, Any]) -> dict[str, Any]:
    """A PaymentIntent or Refund as the ledger compares it with a request
    (`ledger.rules.matching.differences`): major units, upper-case currency, the target it
    carried (`metadata[ledger_target]`, else its customer), the PaymentIntent a refund undoes."""
    metadata = item.get("metadata") or {}
    record = {
        "id": item["id"],
        "object": item["object"],
        "status": item["status"],
        "amount": to_major(item["amount"], item["currency"]),
        "amount_minor": item["amount"],
        "currency": item["currency"].upper(),
        "metadata": metadata,
    }
    if item["object"] == "refund":
        record["charge"] = item.get("payment_intent") or item.get("charge")
    else:
        record["account"] = metadata.get("ledger_target") or item.get("customer")
    return record


def settles_as(item: dict[str, Any]) -> str:
    """confirmed, failed or pending, as the ledger reads the record's status."""
    if item["object"] == "refund":
        return REFUND_STATUS.get(item["status"], "")
    if item["status"] == "requires_payment_method":
        # A declined card puts the intent back here with the error; a new one waits for its card.
        return "failed" if item.get("last_payment_error") else "pending"
    return INTENT_STATUS.get(item["status"], "")


def created_at(item: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(int(item["created"]), UTC)
