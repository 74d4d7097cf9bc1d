"""The adapter of the sandbox card-payments provider's own JSON API (`devstack.sandbox.payments`):
charges and refunds found by idempotency key, checked against what we asked for before they
count. The crash test and the drills speak to the sandbox through it."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar

import httpx

from ledger.models import Effect
from ledger.rules.matching import differences, is_refund
from reconcilers.providers.base import AdapterBase, Backing, http_client
from reconcilers.providers.outcomes import (
    Listing,
    ListingBroken,
    Lookup,
    Record,
    Sent,
    duplicate,
    found,
    inconclusive,
    not_found,
)
from reconcilers.providers.sandbox_payments.statement import fetch_sandbox_statement

# Pages of 100 per collection a window listing may take before it gives up (and is retried a
# minute later); streamed, a page at a time, so the bound is time, not memory.
MAX_PAGES = 10_000
_PROVIDER_STATUS = {"succeeded": "confirmed", "pending": "pending", "failed": "failed"}


@dataclass
class SandboxPayments(AdapterBase):
    name: ClassVar[str] = "sandbox_payments"

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing:
        """Its lookup is a list search by key (`GET /charges?idempotency_key=`), consistent
        at once; its list API takes a creation-time range, once it knows where the provider
        is. It keeps keys as long as it keeps charges (it does not say: not bounded here)."""
        return Backing(
            lookup=True,
            lookup_consistency="consistent",
            proves_absence=True,
            lists_windows=bool(config.get("base_url")),
            fetches_statements=bool(config.get("base_url")),
            executes=True,
        )

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]:
        base_url = config.get("base_url", "")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            return ["base_url must be the provider's http(s) address"]
        return []

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
                timeout=self.timeout,
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
                timeout=self.timeout,
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
        """Every charge and refund the provider created in [start, end), streamed page by page
        (its list API: `created[gte]`, `created[lt]`, `starting_after`): a page is fetched as
        the records are read, and a page it cannot have raises `ListingBroken`."""
        if not self.base_url:
            return Listing(False, detail="no base_url configured for the payments provider")
        return Listing(True, self._stream(start, end))

    def _stream(self, start: datetime, end: datetime) -> Iterator[Record]:
        for collection in ("charges", "refunds"):
            for page in self._pages(collection, start, end):
                yield from page

    def _pages(self, collection: str, start: datetime, end: datetime) -> Iterator[list[Record]]:
        """Every record of one collection in the window, a page at a time."""
        params: dict[str, Any] = {
            "limit": 100,
            "created[gte]": math.floor(start.timestamp()),
            "created[lt]": math.ceil(end.timestamp()),
        }
        for _ in range(MAX_PAGES):
            try:
                response = http_client().get(
                    f"{self.base_url}/{collection}",
                    params=params,
                    timeout=self.timeout,
                )
                body = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                raise ListingBroken(f"{collection}: no list ({type(exc).__name__})") from None
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list) or body.get("object") != "list":
                raise ListingBroken(
                    f"{collection}: the provider answered {response.status_code} without a list"
                )
            try:
                page = [_record(item) for item in data]
            except (KeyError, TypeError, ValueError) as exc:
                raise ListingBroken(
                    f"{collection}: a record the ledger cannot read ({exc})"
                ) from None
            yield page
            if not body.get("has_more"):
                return
            params["starting_after"] = data[-1]["id"]
        raise ListingBroken(f"{collection}: more than {MAX_PAGES} pages")

    def fetch_statement(self, period_start: datetime, period_end: datetime) -> tuple[str, bytes]:
        """The provider's statement of [period_start, period_end): a file name whose extension
        says its format, and its content (`reconcilers.statement_fetch`)."""
        return fetch_sandbox_statement(
            self.base_url, period_start, period_end, timeout=self.timeout
        )

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
