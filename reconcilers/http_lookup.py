"""A generic lookup for providers with a search-by-reference endpoint.

Configured per tool, e.g. in tools.toml:

    reconciler = "http_lookup"
    reconciler_config = { url = "http://tickets.internal/search?ref={idempotency_key}",
                          records = "data", key = "reference", status = "state",
                          ref = "id", confirmed = ["open", "closed"], failed = ["rejected"] }

`records` is a dotted path to the list of matches in the JSON answer; each match must echo our
key at `key`, otherwise the answer proves nothing. A provider that answers with one object
instead (`single_object = true`: the record at `records`, or none) can be asked too, but its
"none", like a 404 taken as not found (`not_found_on_404 = true`), never proves absence: only a
list answer can (`answers_with_lists`, `lookup_proves_absence`).

With `window_url` (a template with {start} and {end}) it also lists what the provider created in
a window, for restore mode (`list_window`); `created` is the path of each record's creation time
(ISO 8601), `next` the path of the next page's URL when the provider pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from ledger.models import Effect
from reconcilers.adapters import (
    Listing,
    Lookup,
    Record,
    duplicate,
    found,
    http_client,
    inconclusive,
    not_found,
)

# Pages a window listing may follow before it gives up (and is retried a minute later).
MAX_PAGES = 500


def _at(value: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdecimal() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


@dataclass
class HttpLookup:
    name: ClassVar[str] = "http_lookup"
    config: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def answers_with_lists(config: dict[str, Any]) -> bool:
        """A list search, unless configured to take single objects or a 404 as answers."""
        return not config.get("single_object") and not config.get("not_found_on_404")

    def lookup(self, effect: Effect) -> Lookup:
        template = self.config.get("url")
        if not isinstance(template, str) or "{idempotency_key}" not in template:
            return inconclusive("http_lookup needs a url template with {idempotency_key}")
        url = template.replace("{idempotency_key}", quote(effect.idempotency_key, safe=""))
        try:
            response = http_client().get(url, timeout=float(self.config.get("timeout", 5)))
        except httpx.HTTPError as exc:
            return inconclusive(f"provider unreachable: {type(exc).__name__}")
        # Off unless configured: a mistyped search URL also answers 404, and a not-found can
        # be taken as proof of non-receipt.
        if response.status_code == 404 and self.config.get("not_found_on_404", False):
            return not_found("provider answered 404")
        if response.status_code != 200:
            return inconclusive(f"provider answered {response.status_code}")
        try:
            records = _at(response.json(), self.config.get("records", "data"))
        except ValueError:
            return inconclusive("provider answered something that is not JSON")
        listed = not self.config.get("single_object")
        if not listed:
            records = [] if records is None else [records]
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            return inconclusive("provider answer has no list of records")
        key_path = self.config.get("key", "idempotency_key")
        if any(_at(r, key_path) != effect.idempotency_key for r in records):
            return inconclusive("provider answer does not echo our key")
        if not records:
            return not_found("no record with our key", listed=listed)
        ref_path = self.config.get("ref", "id")
        if len(records) > 1:
            refs = [str(_at(r, ref_path)) for r in records]
            return duplicate(refs, f"provider holds {len(records)} records under one key")
        record = records[0]
        state = _at(record, self.config.get("status", "status"))
        ref = _at(record, ref_path)
        status = self._status(state)
        if not isinstance(ref, (str, int)):
            return inconclusive("provider record lacks a reference")
        return replace(found(str(ref), status, answer=record), listed=listed)

    @staticmethod
    def lists_windows(config: dict[str, Any]) -> bool:
        """Only with a `window_url` configured."""
        return isinstance(config.get("window_url"), str)

    def _status(self, state: Any) -> str:
        if state in self.config.get("confirmed", ["confirmed", "succeeded"]):
            return "confirmed"
        if state in self.config.get("failed", ["failed"]):
            return "failed"
        return "pending"

    def list_window(self, start: datetime, end: datetime) -> Listing:
        """Every record the provider created in [start, end), when a `window_url` template
        with {start} and {end} (ISO 8601, UTC) is configured; pages followed through the
        answer's `next` (a dotted path to the next page's URL, when configured)."""
        template = self.config.get("window_url")
        if not isinstance(template, str) or "{start}" not in template or "{end}" not in template:
            return Listing(False, detail="http_lookup needs a window_url with {start} and {end}")
        url: Any = template.replace("{start}", quote(start.isoformat(), safe="")).replace(
            "{end}", quote(end.isoformat(), safe="")
        )
        records: list[Record] = []
        for _ in range(MAX_PAGES):
            try:
                response = http_client().get(url, timeout=float(self.config.get("timeout", 5)))
                body = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                return Listing(False, detail=f"no list ({type(exc).__name__})")
            page = _at(body, self.config.get("records", "data"))
            if not isinstance(page, list) or not all(isinstance(r, dict) for r in page):
                return Listing(False, detail=f"answer {response.status_code} has no list")
            try:
                records += [self._record(r) for r in page]
            except (TypeError, ValueError) as exc:
                return Listing(False, detail=f"a record the ledger cannot read ({exc})")
            url = _at(body, self.config["next"]) if self.config.get("next") else None
            if not url:
                return Listing(True, tuple(records))
        return Listing(False, detail=f"more than {MAX_PAGES} pages")

    def _record(self, record: dict[str, Any]) -> Record:
        ref = _at(record, self.config.get("ref", "id"))
        created = _at(record, self.config.get("created", "created_at"))
        if not isinstance(ref, (str, int)) or not isinstance(created, str):
            raise ValueError("no reference or creation time")
        status = {"confirmed": "succeeded", "failed": "failed"}.get(
            self._status(_at(record, self.config.get("status", "status"))), "pending"
        )
        occurred = datetime.fromisoformat(created)
        return Record(
            provider_ref=str(ref),
            reference=str(_at(record, self.config.get("key", "idempotency_key")) or ""),
            type="charge",
            status=status,
            amount_minor=0,
            currency="",
            occurred_at=occurred if occurred.tzinfo else occurred.replace(tzinfo=UTC),
        )
