"""The payments sandbox's Stripe face: the part of Stripe's API (`/v1/…`) that a paying agent
and the ledger's Stripe adapter use, answered in Stripe's shapes, so that the official SDK
talks to the sandbox as it would to api.stripe.com.

| endpoint                                  | what it does                                      |
| ----------------------------------------- | ------------------------------------------------- |
| `POST /v1/payment_intents`                | create (and with `confirm=true`, charge) one      |
| `POST /v1/payment_intents/{id}/confirm`   | charge one created unconfirmed                    |
| `GET /v1/payment_intents[/{id}]`          | retrieve one; list by `created[…]`, newest first  |
| `GET /v1/payment_intents/search`          | search by `metadata['key']:'value'`, paged        |
| `POST /v1/refunds`, `GET /v1/refunds[/…]` | refund (part of) a PaymentIntent; retrieve, list  |
| `/v1/reporting/…`, `/v1/files/…`          | reports (`devstack.sandbox.stripe_reporting`)     |

As Stripe: a secret key authenticates every request (`Authorization: Bearer sk_test_…` or
basic auth with the key as user; only test keys, `rk_test_…` only reads); parameters are
form-encoded and a misspelt one is an error; a POST's `Idempotency-Key` saves its answer
for 24 hours (the same key and parameters replay it with `Idempotent-Replayed: true`, other
parameters are a 400 `idempotency_error`; answers to invalid parameters are not saved); a
declined card is a 402 `card_error` naming the PaymentIntent; lists are `list` objects with
`has_more`, paged by `starting_after`; a search answers a `search_result` (`data`, `has_more`,
`next_page`, `url`; `total_count` only with `expand[]=total_count`), paged by `page`. Events
(`payment_intent.created`, `.succeeded`, `.payment_failed`, `refund.created`) go out signed
with `Stripe-Signature` when a webhook URL and secret are known (`StripeFace.webhook_target`).

The sandbox's fault knobs (`X-Sandbox-Fault`, `/_sandbox/faults`) apply here too (the SDK
sends extra headers per request); `POST /_sandbox/stripe/settings` adds Stripe's own trouble:
`{"rate_limit": N}` answers the next N requests 429, `{"truncate": N}` cuts the next N
answers in half, `{"key_ttl": S}` keeps keys S seconds instead of a day, `{"hold_webhooks": 1}`
keeps events in the outbox (an endpoint that is down) until `{"hold_webhooks": 0}` sends them,
`{"search_lag": S}` leaves what was created in the last S seconds out of search results (Stripe's
search index lags its writes) and `{"search_rate_limit": N}` answers the next N searches 429.
`GET /_sandbox/stripe/requests` counts the requests each endpoint was sent
(`{"payment_intent.list": 2, "payment_intent.search": 1, …}`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib.util
import json
import os
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from devstack.sandbox import stripe_objects as objects
from devstack.sandbox.faults import Faults
from devstack.sandbox.service import HttpError, Reply, Request, new_id
from devstack.sandbox.stripe_objects import SCHEMA, invalid, listing, only
from devstack.sandbox.webhooks import WebhookSender, deliveries

if TYPE_CHECKING:
    from devstack.sandbox.service import Provider

__all__ = ["SCHEMA", "StripeFace"]

KEY_TTL = 24 * 3600
SETTINGS = {
    "rate_limit": 0,
    "truncate": 0,
    "key_ttl": KEY_TTL,
    "hold_webhooks": 0,
    "search_lag": 0,
    "search_rate_limit": 0,
}
# Reports and their files, where the sandbox has them.
_REPORTING = importlib.util.find_spec("devstack.sandbox.stripe_reporting") is not None
_TEST_KEY = re.compile(r"(sk|rk)_test_[A-Za-z0-9_]{1,200}")
_INTENT_PARAMS = {
    "amount",
    "currency",
    "confirm",
    "payment_method",
    "payment_method_types",
    "automatic_payment_methods",
    "metadata",
    "description",
    "customer",
    "receipt_email",
    "statement_descriptor_suffix",
    "return_url",
    "off_session",
}
_LIST_FILTERS = {"payment_intent": ("customer",), "refund": ("payment_intent", "charge")}
_RANGE = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
Key = tuple[str, str | None]  # the request's id and its idempotency key


class StripeWebhookSender(WebhookSender):
    """Events delivered as Stripe delivers them: `Stripe-Signature: t=…,v1=…`, an HMAC-SHA256
    of "t.payload", from an outbox of their own."""

    table = "stripe_webhook_deliveries"
    header = "Stripe-Signature"


class StripeFace:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.store = provider.store
        self._lock = threading.Lock()
        self.settings = dict(SETTINGS)
        self.requests: Counter[str] = Counter()
        url, secret = self.webhook_target(provider.options.webhook_url)
        self.webhooks = (
            StripeWebhookSender(self.store, url, secret, "stripe-sandbox")
            if url and secret
            else None
        )

    @staticmethod
    def webhook_target(webhook_url: str | None) -> tuple[str, str]:
        """Where events go and the secret they are signed with: SANDBOX_STRIPE_WEBHOOK_URL, else
        the ledger's Stripe door beside the sandbox's own (`…/webhooks/sandbox-pay` →
        `…/callbacks/stripe`); SANDBOX_STRIPE_WEBHOOK_SECRET, else the `stripe` entry of
        LEDGER_WEBHOOK_SECRETS."""
        url = os.environ.get("SANDBOX_STRIPE_WEBHOOK_URL", "")
        if not url and webhook_url and re.search(r"/webhooks/[^/]+/?$", webhook_url):
            url = re.sub(r"/webhooks/[^/]+/?$", "/callbacks/stripe", webhook_url)
        secret = os.environ.get("SANDBOX_STRIPE_WEBHOOK_SECRET", "")
        for entry in os.environ.get("LEDGER_WEBHOOK_SECRETS", "").split(","):
            name, _, value = entry.strip().partition(":")
            if not secret and name == "stripe":
                secret = value
        return url, secret

    def start(self) -> None:
        self._dispatch()  # deliveries a killed process left pending

    def stop(self) -> None:
        if self.webhooks:
            self.webhooks.stop()

    def _dispatch(self) -> None:
        if self.webhooks and not self.settings["hold_webhooks"]:
            self.webhooks.dispatch()

    # --- Requests ------------------------------------------------------------------------

    def handle(self, request: Request, faults: Faults) -> Reply:
        request_id = new_id("req")
        try:
            reply = self._route(request, faults, request_id)
        except HttpError as error:
            reply = error.reply()
        reply.headers.setdefault("Request-Id", request_id)
        if request.method == "GET" and self._spend("truncate") and reply.raw is None:
            whole = json.dumps(reply.payload).encode()
            reply.raw = whole[: len(whole) // 2]
        return reply

    def _route(self, request: Request, faults: Faults, request_id: str) -> Reply:
        key = authenticate(request)
        if self._spend("rate_limit"):
            return objects.too_many()
        if request.method == "POST" and key.startswith("rk_"):
            raise HttpError(
                403,
                "invalid_request_error",
                f"The provided key '{mask(key)}' does not have the required permissions for this"
                " endpoint.",
            )
        parts = request.path.split("/")[2:]
        made = (request_id, None)
        match request.method, parts:
            case "POST", ["payment_intents"]:
                return self._idempotent(request, faults, made, self._create_intent)
            case "POST", ["payment_intents", intent_id, "confirm"]:
                confirm = lambda db, params, at: self._confirm(db, params, at, intent_id)  # noqa: E731
                return self._idempotent(request, faults, made, confirm)
            case "POST", ["refunds"]:
                return self._idempotent(request, faults, made, self._create_refund)
            case "GET", ["payment_intents"]:
                return self._list(request, "payment_intent")
            case "GET", ["refunds"]:
                return self._list(request, "refund")
            case "GET", ["payment_intents", "search"]:
                return self._search(request, "payment_intent")
            case "GET", ["payment_intents", intent_id]:
                return Reply(200, self._retrieve(intent_id, "payment_intent"))
            case "GET", ["refunds", refund_id]:
                return Reply(200, self._retrieve(refund_id, "refund"))
            case _, ["reporting" | "files", *_] if _REPORTING:
                from devstack.sandbox import stripe_reporting

                reply = stripe_reporting.handle(self, request)
                if reply is not None:
                    return reply
        raise HttpError(
            404,
            "invalid_request_error",
            f"Unrecognized request URL ({request.method}: {request.path}).",
        )

    def _served(self, endpoint: str) -> None:
        with self._lock:
            self.requests[endpoint] += 1

    def _spend(self, knob: str) -> bool:
        with self._lock:
            if self.settings[knob] > 0:
                self.settings[knob] -= 1
                return True
        return False

    # --- Creating, under idempotency keys ------------------------------------------------

    def _idempotent(
        self,
        request: Request,
        faults: Faults,
        made: Key,
        create: Callable[[sqlite3.Connection, dict[str, Any], Key], Reply],
    ) -> Reply:
        params = objects.form(request.body)
        key = request.header("Idempotency-Key")
        if key is not None and not 1 <= len(key) <= 255:
            raise invalid("Idempotency-Key must be 1 to 255 characters.", code="idempotency_key")
        if faults.ignore_keys or faults.reference_only:
            key = None  # a provider that keeps no keys
        pairs = sorted(parse_qsl(request.body.decode(), keep_blank_values=True))
        fingerprint = hashlib.sha256(json.dumps([request.path, pairs]).encode()).hexdigest()
        with self.store.transaction() as db:
            if key is not None:
                replay = self._replay(db, key, fingerprint)
                if replay is not None:
                    return replay
            reply = create(db, params, (made[0], key))
            if key is not None:
                db.execute(
                    "INSERT INTO stripe_idempotency"
                    " (key, fingerprint, status, body, request_id, created)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        key,
                        fingerprint,
                        reply.status,
                        json.dumps(reply.payload),
                        made[0],
                        time.time(),
                    ),
                )
                reply.headers["Idempotency-Key"] = key
        self._dispatch()
        return reply

    def _replay(self, db: sqlite3.Connection, key: str, fingerprint: str) -> Reply | None:
        saved = db.execute("SELECT * FROM stripe_idempotency WHERE key = ?", (key,)).fetchone()
        if saved is not None and saved["created"] < time.time() - self.settings["key_ttl"]:
            # Pruned once a day old: the key makes a new request again (Stripe's rule).
            db.execute("DELETE FROM stripe_idempotency WHERE key = ?", (key,))
            saved = None
        if saved is None:
            return None
        if saved["fingerprint"] != fingerprint:
            raise HttpError(
                400,
                "idempotency_error",
                "Keys for idempotent requests can only be used with the same parameters they"
                f" were first used with. Try using a key other than '{key}' if you meant to"
                " execute a different request.",
            )
        headers = {
            "Idempotency-Key": key,
            "Idempotent-Replayed": "true",
            "Original-Request": saved["request_id"],
        }
        return Reply(saved["status"], json.loads(saved["body"]), headers)

    def _create_intent(self, db: sqlite3.Connection, params: dict[str, Any], made: Key) -> Reply:
        only(params, _INTENT_PARAMS)
        intent = objects.payment_intent(params, int(time.time()))
        objects.attach(intent, objects.text(params, "payment_method", 255))
        confirming = objects.flag(params, "confirm")
        objects.flag(params, "off_session")
        self._write(db, intent, new=True)
        self._announce(db, "payment_intent.created", intent, made)
        return self._charged(db, intent, made) if confirming else Reply(200, intent)

    def _confirm(
        self, db: sqlite3.Connection, params: dict[str, Any], made: Key, intent_id: str
    ) -> Reply:
        only(params, {"payment_method", "return_url", "off_session"})
        intent = self._fetch(db, intent_id, "payment_intent")
        if intent["status"] not in ("requires_payment_method", "requires_confirmation"):
            raise invalid(
                f"This PaymentIntent's status is {intent['status']}; it cannot be confirmed.",
                code="payment_intent_unexpected_state",
            )
        objects.attach(intent, objects.text(params, "payment_method", 255))
        return self._charged(db, intent, made)

    def _charged(self, db: sqlite3.Connection, intent: dict[str, Any], made: Key) -> Reply:
        """Confirm and save the intent: 200 when it succeeded, Stripe's 402 when declined."""
        method = intent["payment_method"]
        error = objects.confirm(intent)
        self._write(db, intent)
        if error is None:
            self._announce(db, "payment_intent.succeeded", intent, made)
            return Reply(200, intent)
        self._announce(db, "payment_intent.payment_failed", intent, made)
        card = {"id": new_id("pm"), "object": "payment_method", "type": "card", "token": method}
        return Reply(402, {"error": {**error, "payment_intent": intent, "payment_method": card}})

    def _create_refund(self, db: sqlite3.Connection, params: dict[str, Any], made: Key) -> Reply:
        only(params, {"payment_intent", "charge", "amount", "metadata", "reason"})
        intent_id = objects.text(params, "payment_intent", 255)
        charge = objects.text(params, "charge", 255)
        if (intent_id is None) == (charge is None):
            raise invalid(
                "Refunds name one of payment_intent or charge.",
                "payment_intent",
                "parameter_missing",
            )
        if charge is not None:
            row = db.execute(
                "SELECT id FROM stripe_objects WHERE object = 'payment_intent' AND charge = ?",
                (charge,),
            ).fetchone()
            if row is None:
                raise missing("charge", charge)
            intent_id = row["id"]
        intent = self._fetch(db, str(intent_id), "payment_intent")
        (refunded,) = db.execute(
            "SELECT COALESCE(SUM(amount), 0) FROM stripe_objects"
            " WHERE object = 'refund' AND parent = ? AND status IN ('succeeded', 'pending')",
            (intent["id"],),
        ).fetchone()
        refund = objects.refund(params, intent, intent["amount"] - refunded, int(time.time()))
        self._write(db, refund, new=True)
        self._announce(db, "refund.created", refund, made)
        return Reply(200, refund)

    def _write(self, db: sqlite3.Connection, obj: dict[str, Any], *, new: bool = False) -> None:
        if not new:
            db.execute(
                "UPDATE stripe_objects SET status = ?, charge = ?, body = ? WHERE id = ?",
                (obj["status"], _charge_of(obj), json.dumps(obj), obj["id"]),
            )
            return
        db.execute(
            "INSERT INTO stripe_objects (id, object, created, amount, currency, status, parent,"
            " charge, ledger_key, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                obj["id"],
                obj["object"],
                obj["created"],
                obj["amount"],
                obj["currency"],
                obj["status"],
                obj.get("payment_intent"),
                _charge_of(obj),
                obj["metadata"].get("ledger_key"),
                json.dumps(obj),
            ),
        )

    def _announce(self, db: sqlite3.Connection, kind: str, subject: dict[str, Any], made: Key):
        event = objects.event(kind, subject, made)
        body = json.dumps(event)
        db.execute(
            "INSERT INTO stripe_events (id, type, created, body) VALUES (?, ?, ?, ?)",
            (event["id"], kind, event["created"], body),
        )
        if self.webhooks:
            self.webhooks.record(db, subject["id"], body.encode())

    # --- Reading -------------------------------------------------------------------------

    def _fetch(self, db: sqlite3.Connection, object_id: str, kind: str) -> dict[str, Any]:
        row = db.execute(
            "SELECT body FROM stripe_objects WHERE object = ? AND id = ?", (kind, object_id)
        ).fetchone()
        if row is None:
            raise missing(kind, object_id)
        return json.loads(row["body"])

    def _retrieve(self, object_id: str, kind: str) -> dict[str, Any]:
        self._served(f"{kind}.retrieve")
        with self.store.reading() as db:
            return self._fetch(db, object_id, kind)

    def _list(self, request: Request, kind: str) -> Reply:
        """Newest first, `limit` (1-100, 10 unless said) at a time, after `starting_after`,
        within a creation range (`created`, `created[gt|gte|lt|lte]`, unix seconds)."""
        self._served(f"{kind}.list")
        query = dict(request.query)
        limit = objects.limit(query)
        clauses, args = ["object = ?"], [kind]
        after = query.pop("starting_after", None)
        if after is not None:
            with self.store.reading() as db:
                self._fetch(db, after, kind)
            clauses.append("seq < (SELECT seq FROM stripe_objects WHERE id = ?)")
            args.append(after)
        for name, value in query.items():
            clause = _filter(kind, name, value)
            if clause is None:
                raise invalid(f"Received unknown parameter: {name}", name)
            clauses.append(clause)
            args.append(int(value) if name.startswith("created") else value)
        with self.store.reading() as db:
            rows = db.execute(
                f"SELECT body FROM stripe_objects WHERE {' AND '.join(clauses)}"
                " ORDER BY seq DESC LIMIT ?",
                (*args, limit + 1),
            ).fetchall()
        data = [json.loads(row["body"]) for row in rows[:limit]]
        return Reply(200, listing(f"/v1/{kind}s", data, len(rows) > limit))

    def _search(self, request: Request, kind: str) -> Reply:
        """Stripe's search: the objects whose metadata match every clause of `query`, newest
        first, `limit` (1-100, 10 unless said) at a time, from a `page` cursor; `total_count`
        when `expand[]` asks for it. Objects created in the last `search_lag` seconds are not
        found yet, as Stripe's index is behind its writes."""
        self._served(f"{kind}.search")
        if self._spend("search_rate_limit"):
            return objects.too_many()
        query = dict(request.query)
        limit = objects.limit(query)
        text, page = query.pop("query", None), query.pop("page", None)
        if text is None:
            raise invalid("Missing required param: query.", "query", "parameter_missing")
        expand = {query.pop(name) for name in list(query) if re.fullmatch(r"expand\[\d*\]", name)}
        if query:
            raise invalid(f"Received unknown parameter: {min(query)}", min(query))
        if expand - {"total_count"}:
            raise invalid("This sandbox expands only total_count in search results.", "expand")
        clauses = ["object = ?", "created <= ?"]
        args: list[Any] = [kind, now() - self.settings["search_lag"]]
        for key, value in objects.search_clauses(text):
            clauses.append("json_extract(body, ?) = ?")
            args += [f'$.metadata."{key}"', value]
        matching = " AND ".join(clauses)
        after = [objects.page_after(page)] if page is not None else []
        with self.store.reading() as db:
            rows = db.execute(
                f"SELECT seq, body FROM stripe_objects WHERE {matching}"
                f"{' AND seq < ?' if after else ''} ORDER BY seq DESC LIMIT ?",
                (*args, *after, limit + 1),
            ).fetchall()
            counted = f"SELECT count(*) FROM stripe_objects WHERE {matching}"
            total = db.execute(counted, args).fetchone()[0] if expand else None
        more = objects.page_token(rows[limit - 1]["seq"]) if len(rows) > limit else None
        data = [json.loads(row["body"]) for row in rows[:limit]]
        result = objects.search_result(f"/v1/{kind}s/search", data, more)
        if total is not None:
            result["total_count"] = total
        return Reply(200, result)

    def balance_activity(self, start: int, end: int) -> list[Any]:
        """What moved the balance in [start, end) seconds, oldest first: each succeeded
        PaymentIntent's charge and each refund, for the itemized balance report."""
        from devstack.sandbox.stripe_reporting import Movement

        with self.store.reading() as db:
            rows = db.execute(
                "SELECT o.body, p.body AS paid FROM stripe_objects o"
                " LEFT JOIN stripe_objects p ON p.id = o.parent"
                " WHERE o.created >= ? AND o.created < ? AND o.status = 'succeeded'"
                " ORDER BY o.seq",
                (start, end),
            ).fetchall()
        moved = []
        for row in rows:
            obj = json.loads(row["body"])
            paid = json.loads(row["paid"]) if row["paid"] else obj
            refund = obj["object"] == "refund"
            moved.append(
                Movement(
                    id=obj["balance_transaction"] if refund else f"txn_{obj['id'][3:]}",
                    created=obj["created"],
                    currency=obj["currency"],
                    amount=-obj["amount"] if refund else obj["amount"],
                    reporting_category="refund" if refund else "charge",
                    source=obj["id"] if refund else obj["latest_charge"],
                    payment_intent=paid["id"],
                    charge=str(_charge_of(obj) or ""),
                    description=str(paid.get("description") or ""),
                    payment_metadata=paid["metadata"],
                    refund_metadata=obj["metadata"] if refund else {},
                )
            )
        return moved

    # --- Inspection and settings (`/_sandbox/stripe/…`, never subject to faults) -------------

    def inspect(self, request: Request) -> Reply | None:
        match request.method, request.path.split("/")[3:]:
            case "GET", ["objects"]:
                kind = request.query.get("object")
                with self.store.reading() as db:
                    rows = db.execute(
                        "SELECT body FROM stripe_objects WHERE ? IS NULL OR object = ?"
                        " ORDER BY seq",
                        (kind, kind),
                    ).fetchall()
                return Reply(200, listing("", [json.loads(r["body"]) for r in rows], False))
            case "GET", ["events"]:
                with self.store.reading() as db:
                    rows = db.execute("SELECT body FROM stripe_events ORDER BY seq").fetchall()
                return Reply(200, listing("", [json.loads(r["body"]) for r in rows], False))
            case "GET", ["webhooks"]:
                data = deliveries(self.store, StripeWebhookSender.table)
                return Reply(200, listing("", data, False))
            case "GET", ["requests"]:
                with self._lock:
                    return Reply(200, dict(self.requests))
            case "POST", ["settings"]:
                return self._set(request.json())
        return None

    def _set(self, body: dict[str, Any]) -> Reply:
        for name, value in body.items():
            if name not in self.settings:
                raise HttpError(400, "invalid_request", f"Unknown setting {name!r}.")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise HttpError(400, "invalid_request", f"{name} must be a whole number ≥ 0.")
        with self._lock:
            self.settings.update(body)
            settings = dict(self.settings)
        self._dispatch()  # what a hold kept, once it is lifted
        return Reply(200, settings)

    def reset(self) -> None:
        with self.store.transaction() as db:
            for table in ("stripe_objects", "stripe_idempotency", "stripe_events"):
                db.execute(f"DELETE FROM {table}")
            db.execute(f"DELETE FROM {StripeWebhookSender.table}")
        with self._lock:
            self.settings = dict(SETTINGS)
            self.requests.clear()


def now() -> float:
    return time.time()


def authenticate(request: Request) -> str:
    """The secret key of the request (bearer, or basic with the key as user), or Stripe's 401."""
    scheme, _, value = (request.header("Authorization") or "").partition(" ")
    key = value.strip()
    if scheme.lower() == "basic":
        try:
            key = base64.b64decode(key, validate=True).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            key = ""
    elif scheme.lower() != "bearer":
        raise HttpError(
            401,
            "invalid_request_error",
            "You did not provide an API key. You need to provide your API key in the"
            " Authorization header, using Bearer auth ('Authorization: Bearer YOUR_SECRET_KEY').",
        )
    if not _TEST_KEY.fullmatch(key):
        raise HttpError(401, "invalid_request_error", f"Invalid API Key provided: {mask(key)}")
    return key


def mask(key: str) -> str:
    head = key.split("_")[0] if "_" in key else ""
    return f"{key[: len(head) + 6]}{'*' * 8}{key[-4:]}" if len(key) > 12 else "****"


def missing(kind: str, object_id: str) -> HttpError:
    return HttpError(
        404,
        "invalid_request_error",
        f"No such {kind}: '{object_id:.80}'",
        code="resource_missing",
        param="id",
    )


def _charge_of(obj: dict[str, Any]) -> str | None:
    return obj.get("latest_charge") if obj["object"] == "payment_intent" else obj.get("charge")


def _filter(kind: str, name: str, value: str) -> str | None:
    """The SQL condition of one list parameter, or None when the list takes no such one."""
    if name in _LIST_FILTERS[kind]:
        column = {"customer": "json_extract(body, '$.customer')", "payment_intent": "parent"}
        return f"{column.get(name, name)} = ?"
    match = re.fullmatch(r"created(?:\[(gt|gte|lt|lte)\])?", name)
    if match is None:
        return None
    if not re.fullmatch(r"\d{1,12}", value):
        raise invalid(f"Invalid timestamp: {value:.20}; unix seconds expected.", name)
    return f"created {_RANGE.get(match.group(1) or '', '=')} ?"
