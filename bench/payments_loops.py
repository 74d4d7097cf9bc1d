"""The payment loop, timed: one sequential worker paying N times, in each contender's way.

Every contender makes the same provider call (`ProviderClient.charge`: `POST /charges` with an
`Idempotency-Key`, on one keep-alive httpx connection) with the same request; they differ only
in what they record around it:

* `PlainLoop`: nothing; the key is derived from the payment's own name;
* `LedgerLoop` (the ledger's API, `bench/payments.py` starts the server): `POST /effects` with
  `claim: true`, the call with the `idempotency_key` the ledger issued, `POST /effects/{id}/outcome`
  with the lease token, all on one more keep-alive httpx connection;
* `FloorLoop`: the least a write-ahead record can be, two commits straight on psycopg (the
  intent with its claim inserted, the outcome updated under the lease), no HTTP.

(DBOS, the fourth contender, runs the same loop in a process of its own: `bench.payments_dbos`.)

`run_round` times a round: a few untimed warm-up payments (connections, caches, a gunicorn
worker's first requests), then N timed ones back to back.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

MAX_ERROR_SAMPLES = 5
GIVE_UP_AFTER = 20  # errors in a row: the contender is broken, not unlucky
INTENT, PROVIDER, OUTCOME = "intent+claim", "provider", "outcome"


class PaymentError(Exception):
    pass


@dataclass
class Round:
    """One contender's round. Times in milliseconds; `calls` holds each part of a payment as
    the loop saw it, `server` the ledger's own time per call (from gunicorn's access log)."""

    contender: str
    payments: int  # timed payments that completed
    seconds: float  # wall time of the timed payments, failed attempts included
    latencies: list[float] = field(default_factory=list)
    calls: dict[str, list[float]] = field(default_factory=dict)
    server: dict[str, list[float]] = field(default_factory=dict)
    errors: int = 0  # failed payments, warm-up included
    error_samples: list[str] = field(default_factory=list)
    synchronous_commit: list[str] = field(default_factory=list)  # as read on its connections
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # by party, warm-up included
    attempted: int = 0  # payments started, warm-up included (CPU is divided by this)

    @property
    def rate(self) -> float:
        return self.payments / self.seconds if self.seconds else 0.0


Payment = Callable[[int], dict[str, float]]  # payment number → ms per part


def run_round(name: str, payment: Payment, warmup: int, payments: int) -> Round:
    """`warmup` untimed payments, then `payments` timed ones, back to back."""
    result = Round(name, 0, 0.0)
    in_a_row = 0

    def attempt(number: int) -> dict[str, float] | None:
        nonlocal in_a_row
        result.attempted += 1
        try:
            parts = payment(number)
        except Exception as exc:  # counted and shown: a contender that errs fails the bench
            result.errors += 1
            in_a_row += 1
            if len(result.error_samples) < MAX_ERROR_SAMPLES:
                result.error_samples.append(f"{type(exc).__name__}: {exc}"[:400])
            return None
        in_a_row = 0
        return parts

    for number in range(warmup):
        attempt(number)
        if in_a_row >= GIVE_UP_AFTER:
            result.error_samples.append(f"gave up after {GIVE_UP_AFTER} errors in a row")
            return result
    began = time.perf_counter()
    for number in range(warmup, warmup + payments):
        start = time.perf_counter()
        parts = attempt(number)
        if parts is None:
            if in_a_row >= GIVE_UP_AFTER:
                result.error_samples.append(f"gave up after {GIVE_UP_AFTER} errors in a row")
                break
            continue
        result.latencies.append(1000 * (time.perf_counter() - start))
        for part, ms in parts.items():
            result.calls.setdefault(part, []).append(ms)
        result.payments += 1
    result.seconds = time.perf_counter() - began
    return result


def charge_request(order: str) -> dict[str, Any]:
    """What an agent asks the provider for: a card charge. The card number, CVC and tax id give
    the ledger's redaction real work; every contender sends (and records) the same."""
    return {
        "amount": "49.95",
        "currency": "EUR",
        "description": f"Order {order}: 3 items",
        "card": {"number": "4242 4242 4242 4242", "cvc": "123", "exp_month": 12, "exp_year": 2030},
        "customer": {"email": "ada@example.com", "tax_id": "DE123456789"},
        "metadata": {"order": order, "channel": "agent"},
    }


def elapsed_ms(since: float) -> float:
    return 1000 * (time.perf_counter() - since)


class ProviderClient:
    """The provider call every contender makes, on one keep-alive connection."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)

    def charge(self, key: str, request: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post("/charges", json=request, headers={"Idempotency-Key": key})
        if response.status_code != 201:
            raise PaymentError(f"provider → {response.status_code} {response.text[:200]}")
        charge: dict[str, Any] = response.json()
        return charge

    def close(self) -> None:
        self.http.close()


# --- The contenders in the benchmark's own process ----------------------------------------------


class PlainLoop:
    """The provider call with a key, and no record at all."""

    name = "plain loop"
    synchronous_commit = "n/a (writes nothing)"

    def __init__(self, provider_url: str) -> None:
        self.provider_url = provider_url

    def measure(self, warmup: int, payments: int, tag: str) -> Round:
        provider = ProviderClient(self.provider_url)

        def payment(number: int) -> dict[str, float]:
            order = f"{tag}:pay-{number}"
            start = time.perf_counter()
            provider.charge(hashlib.sha256(order.encode()).hexdigest()[:32], charge_request(order))
            return {PROVIDER: elapsed_ms(start)}

        try:
            return run_round(self.name, payment, warmup, payments)
        finally:
            provider.close()


class LedgerLoop:
    """The ledger's API over one keep-alive connection, the provider call between its two
    calls. A new connection every round, as gunicorn closes idle ones between rounds."""

    name = "ledger"

    def __init__(self, base_url: str, key: str, provider_url: str) -> None:
        self.base_url = base_url
        self.key = key
        self.provider_url = provider_url

    def measure(self, warmup: int, payments: int, tag: str) -> Round:
        ledger = httpx.Client(
            base_url=f"{self.base_url}/api/v1",
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
        )
        provider = ProviderClient(self.provider_url)

        def payment(number: int) -> dict[str, float]:
            request = charge_request(f"{tag}:pay-{number}")
            start = time.perf_counter()
            intent = ledger.post(
                "/effects",
                json={
                    "run_id": tag,
                    "step_id": f"pay-{number}",
                    "tool": "charge_card",
                    "target": "merchant:acct_4821",
                    "request": request,
                    "claim": True,
                    "owner": "payment-loop",
                    "lease_seconds": 60,
                },
            )
            effect = intent.json()
            if intent.status_code != 201 or effect.get("status") != "dispatching":
                raise PaymentError(f"POST /effects → {intent.status_code} {intent.text[:300]}")
            claimed = time.perf_counter()
            charge = provider.charge(effect["idempotency_key"], request)
            charged = time.perf_counter()
            outcome = ledger.post(
                f"/effects/{effect['id']}/outcome",
                json={
                    "lease_token": effect["lease_token"],
                    "status": "confirmed",
                    "provider_ref": charge["id"],
                    "response": charge,
                },
            )
            if outcome.status_code != 200 or outcome.json().get("status") != "confirmed":
                raise PaymentError(f"POST /outcome → {outcome.status_code} {outcome.text[:300]}")
            return {
                INTENT: 1000 * (claimed - start),
                PROVIDER: 1000 * (charged - claimed),
                OUTCOME: elapsed_ms(charged),
            }

        try:
            return run_round(self.name, payment, warmup, payments)
        finally:
            ledger.close()
            provider.close()


FLOOR_TABLE = """
CREATE TABLE IF NOT EXISTS payment_floor (
    id uuid PRIMARY KEY,
    effect_key text NOT NULL UNIQUE,
    idempotency_key text NOT NULL,
    request jsonb NOT NULL,
    status text NOT NULL,
    lease_token text,
    lease_expires_at timestamptz,
    provider_ref text,
    response jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz
)
"""
FLOOR_INTENT = """
INSERT INTO payment_floor (id, effect_key, idempotency_key, request, status, lease_token,
                           lease_expires_at)
VALUES (%s, %s, %s, %s, 'dispatching', %s, now() + interval '60 seconds')
"""
FLOOR_OUTCOME = """
UPDATE payment_floor
   SET status = 'confirmed', provider_ref = %s, response = %s, lease_token = NULL,
       lease_expires_at = NULL, resolved_at = now()
 WHERE id = %s AND lease_token = %s AND lease_expires_at > now()
"""


class FloorLoop:
    """The two commits of a write-ahead record on one psycopg connection, no HTTP: the floor
    under any ledger. Its table (`payment_floor`, in the ledger's database) has what the
    record needs: the key, the request, the lease, the outcome, a unique effect key.

    The connection lives as long as the benchmark, as the ledger's and DBOS's pooled ones do
    (and so that its backend's CPU is still there to be counted when a round ends)."""

    name = "raw psycopg floor"

    def __init__(self, url: str, provider_url: str) -> None:
        import psycopg

        self.provider_url = provider_url
        self.conn = psycopg.connect(url)
        self.conn.execute(FLOOR_TABLE)
        row = self.conn.execute("SHOW synchronous_commit").fetchone()
        self.conn.commit()
        self.synchronous_commit = str(row[0]) if row else "?"

    def measure(self, warmup: int, payments: int, tag: str) -> Round:
        from psycopg.types.json import Jsonb

        conn = self.conn
        provider = ProviderClient(self.provider_url)

        def payment(number: int) -> dict[str, float]:
            effect_key = f"{tag}:pay-{number}"
            request = charge_request(effect_key)
            effect_id, token = uuid.uuid4(), secrets.token_urlsafe(24)
            key = hashlib.sha256(effect_key.encode()).hexdigest()[:32]
            start = time.perf_counter()
            try:
                conn.execute(FLOOR_INTENT, (effect_id, effect_key, key, Jsonb(request), token))
                conn.commit()
                claimed = time.perf_counter()
                charge = provider.charge(key, request)
                charged = time.perf_counter()
                outcome = (charge["id"], Jsonb(charge), effect_id, token)
                if conn.execute(FLOOR_OUTCOME, outcome).rowcount != 1:
                    raise PaymentError("the outcome update matched no dispatching row")
                conn.commit()
            except BaseException:
                conn.rollback()  # the next payment starts on a clean connection
                raise
            return {
                INTENT: 1000 * (claimed - start),
                PROVIDER: 1000 * (charged - claimed),
                OUTCOME: elapsed_ms(charged),
            }

        try:
            result = run_round(self.name, payment, warmup, payments)
            result.synchronous_commit = [self.synchronous_commit]
            return result
        finally:
            provider.close()

    def close(self) -> None:
        self.conn.close()
