"""Adapter for card-payment providers shaped like the sandbox (and Stripe): charges and refunds
found by idempotency key, checked against what we asked for before they count."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar

import httpx

from ledger.models import Effect
from ledger.provider.matching import differences, is_refund
from reconcilers.adapters import (
    Listing,
    Lookup,
    Record,
    Sent,
    duplicate,
    found,
    http_client,
    inconclusive,
    not_found,
)
from reconcilers.statement_fetch import fetch_sandbox_statement

DEFAULT_TIMEOUT = 5.0
# Pages of 100 a window listing may take before it gives up (and is retried a minute later).
MAX_PAGES = 500
_PROVIDER_STATUS = {"succeeded": "confirmed", "pending": "pending", "failed": "failed"}


@dataclass
class SandboxPayments:
    name: ClassVar[str] = "sandbox_payments"
    config: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def answers_with_lists(config: dict[str, Any]) -> bool:
        """Its lookup is a list search by key (`GET /charges?idempotency_key=`), always."""
        return True

    @staticmethod
    def lists_windows(config: dict[str, Any]) -> bool:
        """Its list API takes a creation-time range, once it knows where the provider is."""
        return bool(config.get("base_url"))

    @property
    def base_url(self) -> str:
        return str(self.config.get("base_url") or "").rstrip("/")

    def _collection(self, effect: Effect) -> str:
        return "refunds" if is_refund(effect.request or {}) else "charges"

    def lookup(self, effect: Effect) -> Lookup:
        if not self.base_url:
            return inconclusive("no base_url configured for the payments provider")
        collection = self._collection(effect)
        try:
            response = http_client().get(
                f"{self.base_url}/{collection}",
                params={"idempotency_key": effect.idempotency_key},
                timeout=float(self.config.get("timeout", DEFAULT_TIMEOUT)),
            )
        except httpx.HTTPError as exc:
            return inconclusive(f"provider unreachable: {type(exc).__name__}")
        if response.status_code != 200:
            return inconclusive(f"provider answered {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            return inconclusive("provider answered something that is not JSON")
        # Only a well-formed list answer can prove absence: an empty `data` in a malformed
        # answer proves nothing.
        if not isinstance(body, dict) or body.get("object") != "list":
            return inconclusive("provider answer is not a list object")
        data = body.get("data")
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            return inconclusive("provider answer has no list of records")
        if any(item.get("idempotency_key") != effect.idempotency_key for item in data):
            # A provider that ignores the key filter (or keys altogether) lists other records:
            # nothing here proves or disproves that ours arrived.
            return inconclusive("provider answer does not echo our idempotency key")
        if body.get("has_more"):
            # Not the whole list: neither absence nor a count can be read from it.
            return inconclusive("provider answer is one page of a longer list")
        if not data:
            return not_found(f"no {collection[:-1]} with our idempotency key", listed=True)
        if len(data) > 1:
            refs = [str(item.get("id")) for item in data]
            return duplicate(refs, f"provider holds {len(data)} records under one key")
        return replace(self._judge(effect, data[0]), listed=True)

    def execute(self, effect: Effect) -> Sent:
        """Send an effect the ledger originates (a refund an operator asked for) under its
        idempotency key. Only an answer proves anything: a timeout or a 5xx after the request
        left is `unknown`, and reconciliation asks the provider by key before anything else."""
        if not self.base_url:
            return Sent("not_sent", error={"detail": "no base_url configured"})
        try:
            response = http_client().post(
                f"{self.base_url}/{self._collection(effect)}",
                json=effect.request,
                headers={"Idempotency-Key": effect.idempotency_key},
                timeout=float(self.config.get("timeout", DEFAULT_TIMEOUT)),
            )
        except httpx.ConnectError as exc:
            # Refused before anything was sent: safe to try again later.
            return Sent("not_sent", error={"detail": f"provider unreachable: {exc}"[:500]})
        except httpx.HTTPError as exc:
            return Sent("unknown", error={"detail": f"no answer: {type(exc).__name__}"})
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code == 429:
            return Sent("not_sent", error={"status": 429})
        if 400 <= response.status_code < 500 and response.status_code != 409:
            # The provider refused the request outright: it did nothing.
            return Sent("failed", error={"status": response.status_code, "body": body})
        if response.status_code >= 300 or not isinstance(body, dict):
            return Sent("unknown", error={"status": response.status_code, "body": body})
        status = _PROVIDER_STATUS.get(str(body.get("status")))
        ref = body.get("id") if isinstance(body.get("id"), str) else ""
        outcome = {"confirmed": "confirmed", "failed": "failed"}.get(status or "")
        if status == "pending":
            outcome = "awaiting_confirmation"
        if outcome is None or not ref:
            return Sent("unknown", response=body)
        return Sent(outcome, provider_ref=ref, response=body)

    def list_window(self, start: datetime, end: datetime) -> Listing:
        """Every charge and refund the provider created in [start, end), page by page (its
        list API: `created[gte]`, `created[lt]`, `starting_after`)."""
        if not self.base_url:
            return Listing(False, detail="no base_url configured for the payments provider")
        records: list[Record] = []
        for collection in ("charges", "refunds"):
            listed = self._list_all(collection, start, end)
            if isinstance(listed, str):
                return Listing(False, detail=listed)
            records += listed
        return Listing(True, tuple(records))

    def _list_all(self, collection: str, start: datetime, end: datetime) -> list[Record] | str:
        """Every record of one collection in the window, or why not."""
        params: dict[str, Any] = {
            "limit": 100,
            "created[gte]": math.floor(start.timestamp()),
            "created[lt]": math.ceil(end.timestamp()),
        }
        records: list[Record] = []
        for _ in range(MAX_PAGES):
            try:
                response = http_client().get(
                    f"{self.base_url}/{collection}",
                    params=params,
                    timeout=float(self.config.get("timeout", DEFAULT_TIMEOUT)),
                )
                body = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                return f"{collection}: no list ({type(exc).__name__})"
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list) or body.get("object") != "list":
                return f"{collection}: the provider answered {response.status_code} without a list"
            try:
                records += [_record(item) for item in data]
            except (KeyError, TypeError, ValueError) as exc:
                return f"{collection}: a record the ledger cannot read ({exc})"
            if not body.get("has_more"):
                return records
            params["starting_after"] = data[-1]["id"]
        return f"{collection}: more than {MAX_PAGES} pages"

    def fetch_statement(self, period_start: datetime, period_end: datetime) -> tuple[str, bytes]:
        """The provider's statement of [period_start, period_end): a file name whose extension
        says its format, and its content (`reconcilers.statement_fetch`)."""
        timeout = float(self.config.get("timeout", DEFAULT_TIMEOUT))
        return fetch_sandbox_statement(self.base_url, period_start, period_end, timeout=timeout)

    def _judge(self, effect: Effect, record: dict[str, Any]) -> Lookup:
        ref, status = record.get("id"), _PROVIDER_STATUS.get(str(record.get("status")))
        if not isinstance(ref, str) or not ref or status is None:
            return inconclusive("provider record lacks an id or a known status")
        return found(ref, status, differences(effect, record), answer=record)


def _record(item: dict[str, Any]) -> Record:
    """A listed charge or refund in the ledger's terms (amounts exact, in minor units)."""
    status = str(item["status"])
    if status not in ("succeeded", "pending", "failed"):
        raise ValueError(f"status {status!r}")
    return Record(
        provider_ref=str(item["id"]),
        reference=str(item.get("idempotency_key") or ""),
        type="refund" if item["object"] == "refund" else "charge",
        status=status,
        amount_minor=int(Decimal(str(item["amount"])).scaleb(2)),
        currency=str(item["currency"]).upper(),
        occurred_at=datetime.fromtimestamp(int(item["created"]), UTC),
    )
