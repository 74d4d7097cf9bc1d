"""A sandbox card-payments provider, modelled on real payment APIs (Stripe and the like).

It honours `Idempotency-Key` (same key and body → the same charge again, 200 with
`Idempotent-Replayed: true`; same key, other body → 409), can be asked for a charge by id or
by key, refunds charges without ever refunding more than was charged, can confirm charges
asynchronously (202 `pending` now, `succeeded` plus a signed webhook later), and serves
statements of what it did (`devstack.sandbox.statements`).

    python -m devstack.sandbox.payments --port 8101 [--async-mode --webhook-url URL]

Two faults make it a provider with less to offer: `--ignore-keys` (no keys at all: neither
deduplication nor a search by key) and `--reference-only` (the key is kept as a reference and
`GET /charges?idempotency_key=K` lists every charge under it, but a second POST with the
same key makes a second charge).

Amounts are exact: JSON is parsed into Decimals and stored as integer minor units (cents);
every currency is treated as having two decimal places.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from devstack.sandbox.faults import Faults
from devstack.sandbox.money import format_amount, invalid, parse_amount
from devstack.sandbox.service import (
    HttpError,
    Options,
    Provider,
    Reply,
    Request,
    main,
    new_id,
)
from devstack.sandbox.statements import statement
from devstack.sandbox.store import Store
from devstack.sandbox.stripe_api import SCHEMA as STRIPE_SCHEMA
from devstack.sandbox.stripe_api import StripeFace
from devstack.sandbox.webhooks import SCHEMA as WEBHOOK_SCHEMA
from devstack.sandbox.webhooks import WebhookSender, deliveries

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS transactions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- creation order across charges and refunds
    id TEXT NOT NULL UNIQUE,
    object TEXT NOT NULL CHECK (object IN ('charge', 'refund')),
    status TEXT NOT NULL CHECK (status IN ('pending', 'succeeded')),
    amount INTEGER NOT NULL CHECK (amount > 0),  -- minor units: exact, never a float
    currency TEXT NOT NULL,
    account TEXT,                -- charges: whose card
    charge TEXT,                 -- refunds: the charge they give money back for
    description TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    idempotency_key TEXT,        -- NULL when none was sent, or under the ignore_keys fault
    received_key TEXT,           -- the header as received, whatever the faults
    reference TEXT,              -- received_key, else metadata "reference": statements, searches
    fingerprint TEXT NOT NULL,   -- what "the same body" means when a key comes again
    created INTEGER NOT NULL,    -- seconds, as the API shows it
    created_us INTEGER,          -- microseconds since the epoch: statement periods are exact
    confirm_at REAL              -- pending charges: when the async confirmer succeeds them
);
-- Replays and lookups by key: one charge (or refund) per key.
CREATE UNIQUE INDEX IF NOT EXISTS transactions_key
    ON transactions (object, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The async confirmer's queue.
CREATE INDEX IF NOT EXISTS transactions_pending
    ON transactions (confirm_at) WHERE status = 'pending';
-- How much of a charge was already refunded (refund limits, amount_refunded).
CREATE INDEX IF NOT EXISTS transactions_refunds
    ON transactions (charge) WHERE object = 'refund';
"""
    + WEBHOOK_SCHEMA
)
# Columns added after the first stores were made (`make run` keeps its store across versions),
# each with what fills it in on the rows that were there: the reference as it would have been
# recorded, the creation second as the exact time.
_UPGRADE = {
    "reference TEXT": "UPDATE transactions"
    " SET reference = COALESCE(received_key, json_extract(metadata, '$.reference'))",
    "created_us INTEGER": "UPDATE transactions SET created_us = created * 1000000",
}
_INDEXES = (
    # Searches by reference under the reference_only fault: every charge under one reference.
    "CREATE INDEX IF NOT EXISTS transactions_reference"
    " ON transactions (object, reference) WHERE reference IS NOT NULL",
    # Statements: what was created in a period.
    "CREATE INDEX IF NOT EXISTS transactions_created ON transactions (created_us)",
)

_SELECT = """
SELECT t.*, (
    SELECT COALESCE(SUM(r.amount), 0) FROM transactions r
    WHERE r.object = 'refund' AND r.charge = t.id
) AS amount_refunded
FROM transactions t
"""

_CURRENCY = re.compile(r"[A-Za-z]{3}")
NO_FAULTS = Faults()


def _only(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        # As real payment APIs do: a misspelt parameter is an error, not silently dropped.
        raise invalid(f"Received unknown parameter: {unknown[0]}.")


def _text(body: dict[str, Any], name: str, *, required: bool, limit: int = 500) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise invalid(f"`{name}` must be a non-empty string of at most {limit} characters.")
    return value


def _metadata(body: dict[str, Any]) -> dict[str, str]:
    value = body.get("metadata") or {}
    if (
        not isinstance(value, dict)
        or len(value) > 50
        or not all(isinstance(v, str) and len(v) <= 500 for v in value.values())
    ):
        raise invalid("`metadata` must be an object of at most 50 string values.")
    return value


@dataclass(frozen=True)
class ChargeParams:
    amount: int
    currency: str
    account: str
    description: str | None
    metadata: dict[str, str]

    @classmethod
    def parse(cls, body: dict[str, Any]) -> ChargeParams:
        _only(body, {"amount", "currency", "account", "description", "metadata"})
        if "amount" not in body:
            raise invalid("Missing required parameter: amount.")
        currency = body.get("currency")
        if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
            raise invalid('`currency` must be a three-letter ISO code such as "EUR".')
        return cls(
            amount=parse_amount(body["amount"]),
            currency=currency.upper(),
            account=_text(body, "account", required=True, limit=255) or "",
            description=_text(body, "description", required=False),
            metadata=_metadata(body),
        )


@dataclass(frozen=True)
class RefundParams:
    charge: str
    amount: int | None  # None: whatever is left to refund
    metadata: dict[str, str]

    @classmethod
    def parse(cls, body: dict[str, Any]) -> RefundParams:
        _only(body, {"charge", "amount", "metadata"})
        amount = body.get("amount")
        return cls(
            charge=_text(body, "charge", required=True, limit=255) or "",
            amount=None if amount is None else parse_amount(amount),
            metadata=_metadata(body),
        )


def fingerprint(params: ChargeParams | RefundParams) -> str:
    # Over the parsed values, so "10.00", "10.0" and 10.00 are the same request.
    return hashlib.sha256(json.dumps(asdict(params), sort_keys=True).encode()).hexdigest()


def public(row: sqlite3.Row, faults: Faults = NO_FAULTS) -> dict[str, Any]:
    """A charge or refund as the API shows it (under `faults`: which key it knows of)."""
    data: dict[str, Any] = {"id": row["id"], "object": row["object"]}
    if row["object"] == "charge":
        data |= {
            "status": row["status"],
            "amount": format_amount(row["amount"]),
            "currency": row["currency"],
            "account": row["account"],
            "description": row["description"],
            "amount_refunded": format_amount(row["amount_refunded"]),
            "refunded": row["amount_refunded"] == row["amount"],
        }
    else:
        data |= {
            "charge": row["charge"],
            "amount": format_amount(row["amount"]),
            "currency": row["currency"],
            "status": row["status"],
        }
    data["metadata"] = json.loads(row["metadata"])
    # A provider without idempotency keys has no such field at all (the ignore_keys fault);
    # one that keeps keys only as references shows the reference.
    if faults.reference_only and not faults.ignore_keys:
        data["idempotency_key"] = row["reference"]
    elif not faults.ignore_keys:
        data["idempotency_key"] = row["idempotency_key"]
    data["created"] = row["created"]
    return data


class Confirmer:
    """Succeeds pending charges when their time comes, and queues their webhooks.

    Its queue is the store (pending rows with `confirm_at`), so a restarted provider picks up
    where the killed one stopped.
    """

    def __init__(self, store: Store, webhooks: WebhookSender | None) -> None:
        self.store = store
        self.webhooks = webhooks
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="confirmer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self.webhooks:
            self.webhooks.stop()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                next_due = self.confirm_due()
                if self.webhooks:
                    self.webhooks.dispatch()
            except Exception:
                # A dead confirmer would silently stop every confirmation; log and retry.
                traceback.print_exc()
                next_due = time.time() + 1
            self._wake.wait(None if next_due is None else max(0.0, next_due - time.time()))
            # Clearing after the wait can swallow a wake-up, but the loop re-reads the store
            # before it waits again, so no pending charge is missed.
            self._wake.clear()

    def confirm_due(self) -> float | None:
        """Succeed every due charge; returns when the next one is due (None: none pending)."""
        with self.store.transaction() as db:
            due = db.execute(
                "SELECT id FROM transactions WHERE status = 'pending' AND confirm_at <= ?"
                " ORDER BY confirm_at",
                (time.time(),),
            ).fetchall()
            for (charge_id,) in due:
                db.execute(
                    "UPDATE transactions SET status = 'succeeded', confirm_at = NULL WHERE id = ?",
                    (charge_id,),
                )
                if self.webhooks:
                    row = db.execute(_SELECT + " WHERE t.id = ?", (charge_id,)).fetchone()
                    event = {
                        "idempotency_key": row["idempotency_key"],
                        "status": "confirmed",
                        "provider_ref": row["id"],
                        "response": public(row),
                    }
                    self.webhooks.record(db, row["id"], json.dumps(event).encode())
            (next_due,) = db.execute(
                "SELECT MIN(confirm_at) FROM transactions WHERE status = 'pending'"
            ).fetchone()
        return next_due


class PaymentsProvider(Provider):
    """A sandbox card-payments provider with idempotency keys, lookups and refunds."""

    name = "payments"
    default_port = 8101
    # Its Stripe face (`/v1/…`, devstack.sandbox.stripe_api) keeps tables of its own here.
    schema = SCHEMA + STRIPE_SCHEMA
    takes_async = True

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self._upgrade()
        webhooks = None
        if options.webhook_url and options.webhook_secret:
            webhooks = WebhookSender(
                self.store, options.webhook_url, options.webhook_secret, "sandbox-payments"
            )
        self.confirmer = Confirmer(self.store, webhooks)
        self.stripe = StripeFace(self)

    def _upgrade(self) -> None:
        with self.store.transaction() as db:
            have = {row["name"] for row in db.execute("PRAGMA table_info(transactions)")}
            for column, fill in _UPGRADE.items():
                if column.split()[0] not in have:
                    db.execute(f"ALTER TABLE transactions ADD COLUMN {column}")
                    db.execute(fill)
            for index in _INDEXES:
                db.execute(index)

    def start(self) -> None:
        self.confirmer.start()
        self.stripe.start()

    def stop(self) -> None:
        self.confirmer.stop()
        self.stripe.stop()

    def handle(self, request: Request, faults: Faults) -> Reply:
        if request.path.startswith("/v1/"):
            return self.stripe.handle(request, faults)
        match request.method, request.path.split("/")[1:]:
            case "POST", ["charges"]:
                return self.create_charge(request, faults)
            case "GET", ["charges"]:
                return self.list(request, faults, "charge")
            case "GET", ["charges", charge_id]:
                return self.retrieve(charge_id, faults, "charge")
            case "POST", ["refunds"]:
                return self.create_refund(request, faults)
            case "GET", ["refunds"]:
                return self.list(request, faults, "refund")
            case "GET", ["refunds", refund_id]:
                return self.retrieve(refund_id, faults, "refund")
            case "GET", ["balance"]:
                return self.balance()
            case "GET", ["statements"]:
                return statement(self.store, request.query)
        raise HttpError(404, "not_found", f"No such endpoint: {request.method} {request.path}.")

    # --- Creating charges and refunds --------------------------------------------------------

    def create_charge(self, request: Request, faults: Faults) -> Reply:
        params = ChargeParams.parse(request.json())
        key = self._key(request, faults)
        pending = self._asynchronous(request)
        with self.store.transaction() as db:
            if key is not None:
                replay = self._replay(db, "charge", key, fingerprint(params))
                if replay is not None:
                    return replay
            charge_id = new_id("ch")
            db.execute(
                "INSERT INTO transactions (id, object, status, amount, currency, account,"
                " description, metadata, idempotency_key, received_key, reference, fingerprint,"
                " created, created_us, confirm_at)"
                " VALUES (?, 'charge', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    charge_id,
                    "pending" if pending else "succeeded",
                    params.amount,
                    params.currency,
                    params.account,
                    params.description,
                    json.dumps(params.metadata),
                    key,
                    *_received(request, params.metadata),
                    fingerprint(params),
                    *_now(),
                    time.time() + self.options.async_delay if pending else None,
                ),
            )
            row = db.execute(_SELECT + " WHERE t.id = ?", (charge_id,)).fetchone()
        if pending:
            self.confirmer.wake()
        status = 202 if pending else 201
        return Reply(status, public(row, faults), _echo(key))

    def create_refund(self, request: Request, faults: Faults) -> Reply:
        params = RefundParams.parse(request.json())
        key = self._key(request, faults)
        with self.store.transaction() as db:
            if key is not None:
                replay = self._replay(db, "refund", key, fingerprint(params))
                if replay is not None:
                    return replay
            charge = db.execute(
                _SELECT + " WHERE t.object = 'charge' AND t.id = ?", (params.charge,)
            ).fetchone()
            if charge is None:
                raise HttpError(404, "resource_missing", f"No such charge: {params.charge!r}.")
            if charge["status"] != "succeeded":
                raise HttpError(
                    400, "invalid_request", "The charge is still pending.", code="charge_pending"
                )
            left = charge["amount"] - charge["amount_refunded"]
            amount = left if params.amount is None else params.amount
            if left == 0 or amount > left:
                raise HttpError(
                    400,
                    "invalid_request",
                    f"Refunds of {charge['id']} cannot exceed its amount; "
                    f"{format_amount(left)} {charge['currency']} is left to refund.",
                    code="amount_too_large",
                )
            refund_id = new_id("re")
            db.execute(
                "INSERT INTO transactions (id, object, status, amount, currency, charge,"
                " metadata, idempotency_key, received_key, reference, fingerprint, created,"
                " created_us) VALUES (?, 'refund', 'succeeded', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    refund_id,
                    amount,
                    charge["currency"],
                    charge["id"],
                    json.dumps(params.metadata),
                    key,
                    *_received(request, params.metadata),
                    fingerprint(params),
                    *_now(),
                ),
            )
            row = db.execute(_SELECT + " WHERE t.id = ?", (refund_id,)).fetchone()
        return Reply(201, public(row, faults), _echo(key))

    def _key(self, request: Request, faults: Faults) -> str | None:
        """The key to deduplicate by: none from a provider that ignores keys or only keeps
        them as references."""
        if faults.ignore_keys:
            return None
        key = request.header("Idempotency-Key")
        if not key:
            return None
        if len(key) > 255:
            raise invalid("`Idempotency-Key` must be at most 255 characters.")
        return None if faults.reference_only else key

    def _asynchronous(self, request: Request) -> bool:
        header = request.header("X-Sandbox-Async")
        if header is None:
            return self.options.async_mode
        return header.strip().lower() in ("1", "true", "yes")

    def _replay(self, db: sqlite3.Connection, kind: str, key: str, digest: str) -> Reply | None:
        row = db.execute(
            _SELECT + " WHERE t.object = ? AND t.idempotency_key = ?", (kind, key)
        ).fetchone()
        if row is None:
            return None
        if row["fingerprint"] != digest:
            raise HttpError(
                409,
                "idempotency_key_reused",
                f"Keys are for one request only: {key!r} was first used with other parameters.",
            )
        # The object as it is now (a pending charge may have succeeded since).
        return Reply(200, public(row), {"Idempotency-Key": key, "Idempotent-Replayed": "true"})

    # --- Lookups -----------------------------------------------------------------------------

    def retrieve(self, object_id: str, faults: Faults, kind: str) -> Reply:
        with self.store.reading() as db:
            row = db.execute(
                _SELECT + " WHERE t.object = ? AND t.id = ?", (kind, object_id)
            ).fetchone()
        if row is None:
            raise HttpError(404, "resource_missing", f"No such {kind}: {object_id!r}.")
        return Reply(200, public(row, faults))

    def list(self, request: Request, faults: Faults, kind: str) -> Reply:
        try:
            limit = int(request.query.get("limit", "10"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise invalid("`limit` must be an integer from 1 to 100.")
        clauses, args = ["t.object = ?"], [kind]
        # A provider without keys does not know the parameter and ignores it: the answer is
        # simply the latest objects, which the caller must not mistake for "found by key".
        # One that keeps keys only as references searches those: every record under one.
        filters = {"account": "account"} if kind == "charge" else {"charge": "charge"}
        if not faults.ignore_keys:
            filters["idempotency_key"] = "reference" if faults.reference_only else "idempotency_key"
        for name, column in filters.items():
            if name in request.query:
                clauses.append(f"t.{column} = ?")
                args.append(request.query[name])
        # As Stripe's lists: a creation-time range (unix seconds) and a cursor, newest first.
        for name, operator in (("created[gte]", ">="), ("created[lt]", "<")):
            if name in request.query:
                try:
                    args.append(int(request.query[name]))
                except ValueError:
                    raise invalid(f"`{name}` must be a unix time in seconds.") from None
                clauses.append(f"t.created {operator} ?")
        if "starting_after" in request.query:
            clauses.append("t.seq < (SELECT s.seq FROM transactions s WHERE s.id = ?)")
            args.append(request.query["starting_after"])
        with self.store.reading() as db:
            rows = db.execute(
                _SELECT + f" WHERE {' AND '.join(clauses)} ORDER BY t.seq DESC LIMIT ?",
                (*args, limit + 1),
            ).fetchall()
        return Reply(
            200,
            {
                "object": "list",
                "url": f"/{kind}s",
                "has_more": len(rows) > limit,
                "data": [public(row, faults) for row in rows[:limit]],
            },
        )

    def balance(self) -> Reply:
        with self.store.reading() as db:
            sums = db.execute(
                "SELECT currency,"
                " SUM(CASE WHEN object = 'refund' THEN -amount"
                "     WHEN status = 'succeeded' THEN amount ELSE 0 END) AS available,"
                " SUM(CASE WHEN status = 'pending' THEN amount ELSE 0 END) AS pending"
                " FROM transactions GROUP BY currency ORDER BY currency"
            ).fetchall()
            charges, refunds = db.execute(
                "SELECT SUM(object = 'charge' AND status = 'succeeded'),"
                " SUM(object = 'refund') FROM transactions"
            ).fetchone()
        return Reply(
            200,
            {
                "object": "balance",
                "available": {row["currency"]: format_amount(row["available"]) for row in sums},
                "pending": {
                    row["currency"]: format_amount(row["pending"]) for row in sums if row["pending"]
                },
                "charges": charges or 0,
                "refunds": refunds or 0,
            },
        )

    # --- Inspection for tests ----------------------------------------------------------------

    def transactions(self) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute(_SELECT + " ORDER BY t.seq").fetchall()
        return [
            {
                **public(row),
                "received_idempotency_key": row["received_key"],
                "reference": row["reference"],
                "created_us": row["created_us"],
            }
            for row in rows
        ]

    def inspect(self, request: Request) -> Reply | None:
        if (request.method, request.path) == ("GET", "/_sandbox/webhooks"):
            return Reply(200, {"object": "list", "data": deliveries(self.store)})
        if request.path.startswith("/_sandbox/stripe/"):
            return self.stripe.inspect(request)
        return None

    def reset(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM transactions")
            db.execute("DELETE FROM webhook_deliveries")
        self.stripe.reset()


def _received(request: Request, metadata: dict[str, str]) -> tuple[str | None, str | None]:
    """The `Idempotency-Key` header as received, and the reference the provider records:
    that header, else a `reference` in the metadata."""
    header = request.header("Idempotency-Key")
    return header, header or metadata.get("reference")


def _now() -> tuple[int, int]:
    """Now as the API shows it (whole seconds) and as statements need it (microseconds)."""
    now_us = time.time_ns() // 1000
    return now_us // 1_000_000, now_us


def _echo(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key is not None else {}


if __name__ == "__main__":
    main(PaymentsProvider)
