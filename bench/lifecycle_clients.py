"""The lifecycle's clients: the request bodies an agent sends, and one session per client that
runs a lifecycle (intent + claim, then the outcome) over HTTP or, for baseline B, straight on
psycopg."""

from __future__ import annotations

import http.client
import json
import secrets
import uuid
from typing import Any, Protocol
from urllib.parse import urlsplit


class LifecycleError(Exception):
    pass


class Session(Protocol):
    def lifecycle(self, step: int) -> None: ...

    def close(self) -> None: ...


# One client's view of a payment-like request: card number, CVC and a tax id give redaction
# real work; the millisecond timestamp is on charge_card's card-scan allow-list.
def intent_body(run_id: str, step: int, owner: str) -> bytes:
    return json.dumps(
        {
            "run_id": run_id,
            "step_id": f"step-{step}",
            "tool": "charge_card",
            "target": "merchant:acct_4821",
            "request": {
                "amount": 49.95,
                "currency": "EUR",
                "description": f"Order {run_id}/{step}: 3 items",
                "card": {
                    "number": "4242 4242 4242 4242",
                    "cvc": "123",
                    "exp_month": 12,
                    "exp_year": 2030,
                    "holder": "Ada Lovelace",
                },
                "customer": {"email": "ada@example.com", "tax_id": "DE123456789"},
                "timestamp_ms": 1733140000000,
                "metadata": {"cart_items": 3, "channel": "agent"},
            },
            "provenance": {
                "model": "bench-model-1",
                "prompt_hash": "sha256:5d41402abc4b2a76b9719d911017c592",
                "tool_schema_version": "2024-11",
            },
            "claim": True,
            "owner": owner,
            "claim_id": f"claim-{step}",
            "lease_seconds": 60,
        }
    ).encode()


def outcome_body(lease_token: str) -> bytes:
    ref = f"ch_{secrets.token_hex(8)}"
    return json.dumps(
        {
            "lease_token": lease_token,
            "status": "confirmed",
            "provider_ref": ref,
            "response": {
                "id": ref,
                "status": "succeeded",
                "amount": 49.95,
                "currency": "EUR",
                "card_last4": "4242",
            },
        }
    ).encode()


def check_intent(status: int, data: dict[str, Any]) -> tuple[str, str]:
    if status != 201 or data.get("status") != "dispatching" or not data.get("lease_token"):
        raise LifecycleError(f"POST /effects → {status} {json.dumps(data, default=str)[:300]}")
    return str(data["id"]), str(data["lease_token"])


def check_outcome(status: int, data: dict[str, Any]) -> None:
    if status != 200 or data.get("status") != "confirmed":
        raise LifecycleError(f"POST /outcome → {status} {json.dumps(data, default=str)[:300]}")


class HttpSession:
    """One client: a keep-alive connection (stdlib http.client: the lightest client).

    It is replaced every `reconnect_every` lifecycles, as client pools recycle connections:
    gunicorn's workers keep the connections they happened to accept, and 8 connections pinned
    for the whole run can sit 7:1 on two workers; a fresh connection goes to a worker that is
    waiting in accept, which evens the load out.
    """

    def __init__(self, base_url: str, key: str, client: int, reconnect_every: int = 0) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        self.reconnect_every = reconnect_every
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.run_id = f"bench-{client}-{uuid.uuid4().hex[:8]}"
        self.owner = f"worker-{client}"

    def _post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            self.conn.request("POST", path, body, self.headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            raise LifecycleError(f"POST {path}: {type(exc).__name__}: {exc}") from exc
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, {"body": raw[:300].decode(errors="replace")}

    def lifecycle(self, step: int) -> None:
        if self.reconnect_every and step % self.reconnect_every == 0:
            self.conn.close()  # http.client connects again on the next request
        effect_id, token = check_intent(
            *self._post("/api/v1/effects", intent_body(self.run_id, step, self.owner))
        )
        check_outcome(*self._post(f"/api/v1/effects/{effect_id}/outcome", outcome_body(token)))

    def close(self) -> None:
        self.conn.close()


class DirectSession:
    """Baseline B: the bare statements on a psycopg connection of its own, no HTTP."""

    def __init__(self, url: str, key: str, client: int) -> None:
        from bench.baseline_wsgi import BareLedger

        self.ledger = BareLedger(url)
        self.authorization = f"Bearer {key}"
        self.run_id = f"direct-{client}-{uuid.uuid4().hex[:8]}"
        self.owner = f"worker-{client}"

    def lifecycle(self, step: int) -> None:
        status, data = self.ledger.post_effect(
            self.authorization, intent_body(self.run_id, step, self.owner)
        )
        effect_id, token = check_intent(status, data)
        check_outcome(*self.ledger.post_outcome(self.authorization, effect_id, outcome_body(token)))

    def close(self) -> None:
        self.ledger.close()
