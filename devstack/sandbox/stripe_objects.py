"""The Stripe face's objects and parameters: PaymentIntents, Refunds and Events in the shapes
of Stripe's API reference (the fields of its example objects, amounts in minor units,
currencies in lower case), the form-encoded parameters the SDKs send
(`metadata[ledger_key]=…`, `payment_method_types[0]=card`), and the part of Stripe's search
query language the face answers (`search_clauses`).

The face keeps its own tables in the payments sandbox's store, beside the sandbox's charges:

| table                        | what it holds                                                 |
| ---------------------------- | ------------------------------------------------------------- |
| `stripe_objects`             | every PaymentIntent and Refund, as the API shows it (`body`)  |
| `stripe_idempotency`         | the saved answer per `Idempotency-Key` (kept 24 hours)        |
| `stripe_events`              | every Event, in creation order                                |
| `stripe_webhook_deliveries`  | the signed deliveries of those events (an outbox)             |
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import time
from typing import Any
from urllib.parse import parse_qsl

from devstack.sandbox.service import HttpError, Reply, new_id
from devstack.sandbox.webhooks import OUTBOX

SCHEMA = """
CREATE TABLE IF NOT EXISTS stripe_objects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- creation order: lists are newest first
    id TEXT NOT NULL UNIQUE,
    object TEXT NOT NULL CHECK (object IN ('payment_intent', 'refund')),
    created INTEGER NOT NULL,                -- unix seconds, as the API shows it
    amount INTEGER NOT NULL,                 -- minor units of `currency`
    currency TEXT NOT NULL,                  -- lower case, as Stripe writes it
    status TEXT NOT NULL,
    parent TEXT,                             -- refunds: their PaymentIntent
    charge TEXT,                             -- the charge: a PaymentIntent's latest, a refund's
    ledger_key TEXT,                         -- metadata[ledger_key], for inspection
    body TEXT NOT NULL                       -- the object as the API shows it now (JSON)
);
CREATE INDEX IF NOT EXISTS stripe_objects_created ON stripe_objects (object, created);
-- Lists walk it newest first from `starting_after`: a page reads its own rows, not the range.
CREATE INDEX IF NOT EXISTS stripe_objects_seq ON stripe_objects (object, seq);
CREATE INDEX IF NOT EXISTS stripe_objects_parent ON stripe_objects (parent)
    WHERE object = 'refund';
CREATE INDEX IF NOT EXISTS stripe_objects_charge ON stripe_objects (charge);
CREATE TABLE IF NOT EXISTS stripe_idempotency (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,   -- method, path and parameters of the first request
    status INTEGER NOT NULL,
    body TEXT NOT NULL,          -- the answer saved for replays
    request_id TEXT NOT NULL,    -- the first request's id (`Original-Request` on replays)
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS stripe_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    created INTEGER NOT NULL,
    body TEXT NOT NULL
);
""" + OUTBOX.format(table="stripe_webhook_deliveries")

# Test PaymentMethods (docs.stripe.com/testing): what each does when confirmed.
DECLINES = {
    "pm_card_chargeDeclined": "generic_decline",
    "pm_card_visa_chargeDeclined": "generic_decline",
    "pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
    "pm_card_chargeDeclinedExpiredCard": "expired_card",
}
SUCCEEDS = {
    "pm_card_visa",
    "pm_card_mastercard",
    "pm_card_amex",
    "pm_card_visa_debit",
    "pm_card_us",
    "pm_card_gb",
    "pm_card_de",
}
MAX_AMOUNT = 99_999_999  # eight digits, the most Stripe takes in one charge
_CURRENCY = re.compile(r"[a-z]{3}")
_KEY = re.compile(r"([^\[\]]+)((?:\[[^\[\]]*\])*)")


def invalid(message: str, param: str = "", code: str = "parameter_invalid") -> HttpError:
    extra = {"code": code, "param": param} if param else {"code": code}
    return HttpError(400, "invalid_request_error", message, **extra)


# --- Form-encoded parameters ---------------------------------------------------------------


def form(body: bytes) -> dict[str, Any]:
    """`a=1&metadata[k]=v&list[0]=x` → {"a": "1", "metadata": {"k": "v"}, "list": ["x"]}."""
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError):
        raise invalid("The body is not form-encoded parameters.") from None
    params: dict[str, Any] = {}
    for name, value in pairs:
        match = _KEY.fullmatch(name)
        if match is None:
            raise invalid(f"Invalid parameter name: {name}.", name)
        parts = [match.group(1), *re.findall(r"\[([^\[\]]*)\]", match.group(2))]
        _put(params, parts, value, name)
    return {name: _lists(value) for name, value in params.items()}


def _put(node: dict[str, Any], parts: list[str], value: str, name: str) -> None:
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise invalid(f"Invalid parameter name: {name}.", name)
        node = child
    if isinstance(node.get(parts[-1]), dict):
        raise invalid(f"Invalid parameter name: {name}.", name)
    node[parts[-1]] = value


def _lists(value: Any) -> Any:
    """A table whose keys are 0, 1, 2 … is the list the SDK encoded."""
    if not isinstance(value, dict):
        return value
    if value and all(k.isdigit() for k in value):
        return [_lists(value[k]) for k in sorted(value, key=int)]
    return {k: _lists(v) for k, v in value.items()}


def too_many() -> Reply:
    """Stripe's 429, with the Retry-After it sends."""
    error = HttpError(
        429,
        "invalid_request_error",
        "Too many requests hit the API too quickly. We recommend an exponential backoff"
        " of your requests.",
        code="rate_limit",
    ).reply()
    error.headers["Retry-After"] = "1"
    return error


def only(params: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(params) - allowed - {"expand"})
    if unknown:
        # As Stripe does: a misspelt parameter is an error, never silently dropped.
        raise invalid(f"Received unknown parameter: {unknown[0]}", unknown[0])


def limit(query: dict[str, str]) -> int:
    """A list's or a search's `limit`, taken out of its query: 1 to 100, 10 unless said."""
    value = query.pop("limit", "10")
    if not value.isdigit() or not 1 <= int(value) <= 100:
        raise invalid("limit must be an integer from 1 to 100.", "limit")
    return int(value)


def amount(params: dict[str, Any], *, required: bool) -> int | None:
    raw = params.get("amount")
    if raw is None:
        if required:
            raise invalid("Missing required param: amount.", "amount", "parameter_missing")
        return None
    if not isinstance(raw, str) or not raw.isdigit() or not 1 <= int(raw) <= MAX_AMOUNT:
        raise invalid(
            f"Invalid integer: {raw!s:.40}; amount must be a positive integer in the currency's"
            f" smallest unit, at most {MAX_AMOUNT}.",
            "amount",
        )
    return int(raw)


def currency(params: dict[str, Any]) -> str:
    raw = params.get("currency")
    if raw is None:
        raise invalid("Missing required param: currency.", "currency", "parameter_missing")
    value = raw.lower() if isinstance(raw, str) else ""
    if not _CURRENCY.fullmatch(value):
        raise invalid(f"Invalid currency: {raw!s:.20}.", "currency")
    return value


def metadata(params: dict[str, Any]) -> dict[str, str]:
    value = params.get("metadata", {})
    if value == "":
        return {}
    if not isinstance(value, dict) or len(value) > 50:
        raise invalid("metadata must be a hash of at most 50 keys.", "metadata")
    for key, item in value.items():
        if not isinstance(item, str) or len(key) > 40 or len(item) > 500:
            raise invalid(
                "Metadata keys are at most 40 characters and values at most 500.",
                f"metadata[{key}]",
            )
    # An empty value unsets a key (Stripe's rule); on creation it is simply absent.
    return {key: item for key, item in value.items() if item != ""}


def text(params: dict[str, Any], name: str, limit: int = 500) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise invalid(f"{name} must be a string of at most {limit} characters.", name)
    return value


def flag(params: dict[str, Any], name: str) -> bool:
    value = params.get(name, "false")
    if value not in ("true", "false"):
        raise invalid(f"Invalid boolean: {value!s:.20}.", name)
    return value == "true"


# --- Objects, in the shapes of Stripe's API reference --------------------------------------


def payment_intent(params: dict[str, Any], created: int) -> dict[str, Any]:
    """A new PaymentIntent, not yet confirmed."""
    intent_id = new_id("pi")
    automatic = params.get("automatic_payment_methods")
    return {
        "id": intent_id,
        "object": "payment_intent",
        "amount": amount(params, required=True),
        "amount_capturable": 0,
        "amount_details": {"tip": {}},
        "amount_received": 0,
        "application": None,
        "application_fee_amount": None,
        "automatic_payment_methods": (
            {"enabled": automatic.get("enabled") == "true"} if isinstance(automatic, dict) else None
        ),
        "canceled_at": None,
        "cancellation_reason": None,
        "capture_method": "automatic",
        "client_secret": f"{intent_id}_secret_{secrets.token_hex(12)}",
        "confirmation_method": "automatic",
        "created": created,
        "currency": currency(params),
        "customer": text(params, "customer", 255),
        "customer_account": None,
        "description": text(params, "description"),
        "excluded_payment_method_types": None,
        "last_payment_error": None,
        "latest_charge": None,
        "livemode": False,
        "managed_payments": {"enabled": False},
        "metadata": metadata(params),
        "next_action": None,
        "on_behalf_of": None,
        "payment_method": None,
        "payment_method_configuration_details": None,
        "payment_method_options": {},
        "payment_method_types": _method_types(params),
        "processing": None,
        "receipt_email": text(params, "receipt_email", 800),
        "review": None,
        "setup_future_usage": None,
        "shipping": None,
        "source": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": text(params, "statement_descriptor_suffix", 22),
        "status": "requires_payment_method",
        "transfer_data": None,
        "transfer_group": None,
    }


def _method_types(params: dict[str, Any]) -> list[str]:
    types = params.get("payment_method_types", ["card"])
    if not isinstance(types, list) or types != ["card"]:
        raise invalid("This sandbox takes card payments only.", "payment_method_types")
    return types


def attach(intent: dict[str, Any], method: str | None) -> None:
    """Attach a test PaymentMethod by its token (`pm_card_visa`)."""
    if method is None:
        return
    if method not in SUCCEEDS and method not in DECLINES:
        raise HttpError(
            400,
            "invalid_request_error",
            f"No such PaymentMethod: '{method:.60}'",
            code="resource_missing",
            param="payment_method",
        )
    intent["payment_method"] = method
    intent["status"] = "requires_confirmation"


def confirm(intent: dict[str, Any]) -> dict[str, Any] | None:
    """Confirm a PaymentIntent with its PaymentMethod; returns the card error of a decline
    (the intent back to `requires_payment_method`), or None when it succeeded."""
    method = intent["payment_method"]
    if method is None:
        raise invalid(
            "You cannot confirm this PaymentIntent because it's missing a payment method.",
            "payment_method",
            "payment_intent_unexpected_state",
        )
    charge = new_id("ch")
    intent["latest_charge"] = charge
    if method in DECLINES:
        error = {
            "type": "card_error",
            "code": "card_declined",
            "decline_code": DECLINES[method],
            "message": "Your card was declined.",
            "charge": charge,
            "doc_url": "https://stripe.com/docs/error-codes/card-declined",
        }
        intent |= {"status": "requires_payment_method", "last_payment_error": dict(error)}
        intent["payment_method"] = None
        return error
    intent |= {"status": "succeeded", "amount_received": intent["amount"]}
    return None


def refund(
    params: dict[str, Any], intent: dict[str, Any], left: int, created: int
) -> dict[str, Any]:
    """A refund of (part of) a succeeded PaymentIntent; `left`: what it has not refunded."""
    if intent["status"] != "succeeded":
        raise invalid(
            f"This PaymentIntent ({intent['id']}) does not have a successful charge to refund.",
            "payment_intent",
            "charge_not_refundable",
        )
    wanted = amount(params, required=False)
    if left == 0:
        raise invalid(
            f"Charge {intent['latest_charge']} has already been refunded.",
            code="charge_already_refunded",
        )
    if wanted is not None and wanted > left:
        raise invalid(
            f"Refund amount ({wanted}) is greater than unrefunded amount on charge ({left})",
            "amount",
            "amount_too_large",
        )
    reason = text(params, "reason", 40)
    if reason not in (None, "duplicate", "fraudulent", "requested_by_customer"):
        raise invalid(f"Invalid reason: {reason}.", "reason")
    return {
        "id": new_id("re"),
        "object": "refund",
        "amount": left if wanted is None else wanted,
        "balance_transaction": new_id("txn"),
        "charge": intent["latest_charge"],
        "created": created,
        "currency": intent["currency"],
        "customer": intent["customer"],
        "customer_account": None,
        "destination_details": {"card": {"type": "refund"}, "type": "card"},
        "metadata": metadata(params),
        "payment_intent": intent["id"],
        "payment_method": intent["payment_method"],
        "reason": reason,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": "succeeded",
        "transfer_reversal": None,
    }


def event(kind: str, subject: dict[str, Any], request: tuple[str, str | None]) -> dict[str, Any]:
    """An Event announcing `subject` (a snapshot of it), and the request that caused it."""
    return {
        "id": new_id("evt"),
        "object": "event",
        "api_version": None,
        "created": int(time.time()),
        "data": {"object": subject},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": request[0], "idempotency_key": request[1]},
        "type": kind,
    }


def listing(url: str, data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": has_more, "url": url}


def search_result(url: str, data: list[dict[str, Any]], next_page: str | None) -> dict[str, Any]:
    """A page of search results as Stripe's API reference shows one (`total_count` only when
    the request expands it)."""
    return {
        "object": "search_result",
        "data": data,
        "has_more": next_page is not None,
        "next_page": next_page,
        "url": url,
    }


# --- Search queries (`GET /v1/…/search?query=…`) -----------------------------------------------

# One exact match on a metadata key, metadata['key']:'value' (either quote, `\` escapes), after
# an AND unless it is the first.
_CLAUSE = re.compile(
    r"""\s*(?P<joined>AND\s+)?metadata\[(?P<q>['"])(?P<key>[^'"\[\]\\]{1,40})(?P=q)\]"""
    r"""\s*:\s*(?P<v>['"])(?P<value>(?:\\.|[^\\])*?)(?P=v)\s*"""
)
MAX_CLAUSES = 10  # Stripe's most in one query


def search_clauses(query: str) -> list[tuple[str, str]]:
    """`metadata['a']:'1' AND metadata['b']:"2"` → [("a", "1"), ("b", "2")]: exact matches on
    metadata, joined by AND, is what the face's search understands; any other query is a 400
    naming `query` (Stripe's language has more: other fields, OR, negation, ranges)."""
    clauses: list[tuple[str, str]] = []
    at = 0
    while not clauses or at < len(query):
        match = _CLAUSE.match(query, at)
        if match is None or bool(match["joined"]) != bool(clauses) or len(clauses) == MAX_CLAUSES:
            raise invalid(
                "This sandbox searches by metadata['key']:'value' clauses joined by AND, at most"
                f" {MAX_CLAUSES}; it cannot read the query at character {at}.",
                "query",
            )
        clauses.append((match["key"], re.sub(r"\\(.)", r"\1", match["value"])))
        at = match.end()
    return clauses


def page_token(seq: int) -> str:
    """The `next_page` cursor after the object at `seq` (opaque to the client)."""
    return base64.urlsafe_b64encode(f"after:{seq}".encode()).decode().rstrip("=")


def page_after(token: str) -> int:
    """The position a `page` cursor continues after, or Stripe's 400 for one it never gave."""
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    match = re.fullmatch(r"after:(\d{1,18})", text)
    if match is None:
        raise invalid(f"Invalid page: {token:.40}; use the next_page of a search result.", "page")
    return int(match.group(1))
