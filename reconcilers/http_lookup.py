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
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from ledger.models import Effect
from reconcilers.adapters import (
    Lookup,
    duplicate,
    found,
    http_client,
    inconclusive,
    not_found,
)


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
        if state in self.config.get("confirmed", ["confirmed", "succeeded"]):
            status = "confirmed"
        elif state in self.config.get("failed", ["failed"]):
            status = "failed"
        else:
            status = "pending"
        if not isinstance(ref, (str, int)):
            return inconclusive("provider record lacks a reference")
        return replace(found(str(ref), status, answer=record), listed=listed)
