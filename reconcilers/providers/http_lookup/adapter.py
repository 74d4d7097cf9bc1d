"""A generic lookup for providers with a search-by-reference endpoint.

Configured per tool, e.g. in tools.toml:

    reconciler = "http_lookup"
    reconciler_config = { url = "https://tickets.example/search?ref={idempotency_key}",
                          records = "data", key = "reference", status = "state",
                          ref = "id", confirmed = ["open", "closed"], failed = ["rejected"],
                          auth = "bearer", token_env = "TICKETS_TOKEN", paging = "link" }

`records` is a dotted path to the list of matches in the JSON answer; each match must echo our
key at `key`, otherwise the answer proves nothing. A provider that answers with one object
instead (`single_object = true`: the record at `records`, or none) can be asked too, but its
"none", like a 404 taken as not found (`not_found_on_404 = true`), never proves absence: only a
list answer, every page of it, can (`lookup_proves_absence`). Credentials and paging:
`reconcilers.providers.http_lookup.calls`.

With `window_url` (a template with {start} and {end}) it also lists what the provider created in
a window, for restore mode (`list_window`); `created` is the path of each record's creation time
(ISO 8601). Such a listing is streamed a page at a time, at most `window_max_pages` pages
(default 10,000).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import quote

from ledger.models import Effect
from reconcilers.providers.base import AdapterBase, Backing
from reconcilers.providers.http_lookup import calls
from reconcilers.providers.http_lookup.calls import AskLater
from reconcilers.providers.http_lookup.calls import at as _at
from reconcilers.providers.outcomes import (
    Listing,
    ListingBroken,
    Lookup,
    Record,
    duplicate,
    found,
    inconclusive,
    not_found,
)

# Pages one window listing may take (the configuration may set 1 to 100,000).
WINDOW_MAX_PAGES = 10_000


@dataclass
class HttpLookup(AdapterBase):
    name: ClassVar[str] = "http_lookup"

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing:
        """A list search, unless configured to take single objects or a 404 as answers; how
        consistent the search is, the tool says (`search_lag`): nothing here knows."""
        lists = not config.get("single_object") and not config.get("not_found_on_404")
        return Backing(
            lookup=True,
            proves_absence=lists,
            lists_windows=isinstance(config.get("window_url"), str),
        )

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]:
        problems = calls.config_problems(config) + _window_problems(config)
        url = config.get("url")
        if not isinstance(url, str) or "{idempotency_key}" not in url:
            problems.append("url must be a template with {idempotency_key}")
        return problems

    def lookup(self, effect: Effect) -> Lookup:
        template = self.config.get("url")
        if not isinstance(template, str) or "{idempotency_key}" not in template:
            return inconclusive("http_lookup needs a url template with {idempotency_key}")
        url = template.replace("{idempotency_key}", quote(effect.idempotency_key, safe=""))
        try:
            records = self._search(url)
        except AskLater as later:
            return inconclusive(later.detail, retry_after=later.retry_after)
        if records is None:
            return not_found("provider answered 404")
        listed = not self.config.get("single_object")
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

    def _search(self, url: str) -> list[Any] | None:
        """Every record the search answers, over all its pages (None: a 404 taken as not
        found, when so configured: a mistyped search URL also answers 404)."""
        records: list[Any] = []
        try:
            for page in calls.pages(url, self.config, self.mode):
                found_here = _at(page.body, self.config.get("records", "data"))
                if self.config.get("single_object"):
                    return [] if found_here is None else [found_here]
                if not isinstance(found_here, list):
                    raise AskLater("provider answer has no list of records")
                records += found_here
        except AskLater as later:
            if self.config.get("not_found_on_404") and later.status == 404:
                return None
            raise
        return records

    def _status(self, state: Any) -> str:
        if state in self.config.get("confirmed", ["confirmed", "succeeded"]):
            return "confirmed"
        if state in self.config.get("failed", ["failed"]):
            return "failed"
        return "pending"

    def list_window(self, start: datetime, end: datetime) -> Listing:
        """Every record the provider created in [start, end), when a `window_url` template
        with {start} and {end} (ISO 8601, UTC) is configured; pages followed through the
        configured paging. Streamed: a page is fetched when the records before it have been
        read, so a window of any size holds one page in memory; a page the provider does not
        hand over (an error, a 429, an answer without a list, a record the ledger cannot
        read), or more than `window_max_pages` of them (default 10,000), raises
        `ListingBroken`."""
        template = self.config.get("window_url")
        if not isinstance(template, str) or "{start}" not in template or "{end}" not in template:
            return Listing(False, detail="http_lookup needs a window_url with {start} and {end}")
        if problem := self._unready():
            return Listing(False, detail=problem)
        url = template.replace("{start}", quote(start.isoformat(), safe="")).replace(
            "{end}", quote(end.isoformat(), safe="")
        )
        most = int(self.config.get("window_max_pages", WINDOW_MAX_PAGES))
        return Listing(True, self._stream(calls.pages(url, self.config, self.mode, most)))

    def _unready(self) -> str:
        """Why a window cannot be asked for ("" when it can): a configuration short of what
        its credentials and paging need, or a credential whose variable is not set."""
        if problems := calls.config_problems(self.config) + _window_problems(self.config):
            return "; ".join(problems)
        auth = self.config.get("auth", "")
        needed = ("username", "password") if auth == "basic" else ("token",) if auth else ()
        unset = [f"{key}_env" for key in needed if not self.secret(key)]
        return f"a credential's variable is not set ({', '.join(unset)})" if unset else ""

    def _stream(self, pages: Iterator[calls.Page]) -> Iterator[Record]:
        """The records of each page as it comes; `ListingBroken` where a page could not be
        had or read."""
        while True:
            try:
                page = next(pages, None)
            except AskLater as later:
                raise ListingBroken(later.detail) from None
            if page is None:
                return
            found_here = _at(page.body, self.config.get("records", "data"))
            if not isinstance(found_here, list) or not all(isinstance(r, dict) for r in found_here):
                raise ListingBroken("an answer has no list")
            try:
                records = [self._record(r) for r in found_here]
            except (TypeError, ValueError) as exc:
                raise ListingBroken(f"a record the ledger cannot read ({exc})") from None
            yield from records

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


def _window_problems(config: dict[str, Any]) -> list[str]:
    most = config.get("window_max_pages", WINDOW_MAX_PAGES)
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= 100_000:
        return ["window_max_pages must be a whole number from 1 to 100000"]
    return []
