"""The Stripe adapter: payments (PaymentIntents) and refunds, asked about through Stripe's SDK.

How an effect travels to Stripe: the agent creates the PaymentIntent (the ledger sends
refunds itself, `execute`) with the effect's idempotency key as Stripe's `Idempotency-Key`
and the effect's identity in the object's metadata: `metadata[ledger_key]` (the idempotency
key), `metadata[ledger_effect]` (the effect's id) and `metadata[ledger_target]` (its target,
unless the PaymentIntent's `customer` is the target).

How it is found again: the *list* endpoints (`GET /v1/payment_intents`, `GET /v1/refunds`)
over a creation range from the effect's creation (less `clock_skew`, default 5 minutes) to now
(plus the same), every page, then the records whose `metadata[ledger_key]` is ours. Stripe's
lists are read-after-write consistent; its Search API is not (docs.stripe.com/search: "Don't
use search for read-after-write flows … data is searchable in under 1 minute", up to an hour
behind in an outage), so it is never used. A not-found is a complete listing (`listed`) and
proves absence; one record is found (its amount and currency compared with the request's,
`ledger.rules.matching.differences`), two are a duplicate; anything short of every page
(an error, a 429, a timeout, a page of an unexpected shape, more pages than `max_pages`) is
inconclusive.

Keys: Stripe keeps an idempotency key's answer at least 24 hours, then may prune it
(docs.stripe.com/idempotency), so the backing is `honours_key` with `key_ttl` 24h and loadtools
refuses a longer one. Past that horizon the ledger no longer counts the key as protection
(`ledger.effects.recovery.retry_ground` compares the effect's age with key_ttl): an uncertain
effect older than a day is sent again only on a lookup's proof of absence, never blindly.

The secret key is read from the variable `api_key_env` names (by mode: `{ test = …, live = …
}`); a test tool must hold a test key (`sk_test_…`/`rk_test_…`) and a live tool a live one,
else every call is refused before it leaves (lookups inconclusive, sends not sent), naming the
variable. A restricted key (`rk_…`) with read access to PaymentIntents and Refunds is enough
for lookups and window listings; refunds need write access.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from django.utils import timezone

from ledger.models import Effect
from ledger.policy.iso4217 import EXPONENTS
from ledger.rules.matching import differences, is_refund
from ledger.statements.formats import ReportFormat
from reconcilers.providers.base import AdapterBase, Backing, secret_variable
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
from reconcilers.providers.stripe import calls, reporting
from reconcilers.providers.stripe.callbacks import StripeCallbacks
from reconcilers.providers.stripe.calls import Failure
from reconcilers.providers.stripe.report import REPORT

KEY_TTL = timedelta(hours=24)
_RECORD_STATUS = {"confirmed": "succeeded", "pending": "pending", "failed": "failed"}
_KINDS = ("payment_intent", "refund")
# Numbers the configuration may set: seconds of clock difference allowed around a lookup's
# range, pages a listing may take before it gives up, records per page (Stripe's most: 100).
_NUMBERS = (
    ("clock_skew", 0, 3600),
    ("max_pages", 1, 10_000),
    ("page_size", 1, 100),
    ("window_max_pages", 1, 100_000),
)


@dataclass
class StripeAdapter(AdapterBase):
    name: ClassVar[str] = "stripe"
    callbacks: ClassVar[StripeCallbacks] = StripeCallbacks()
    report: ClassVar[ReportFormat] = REPORT

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing:
        return Backing(
            honours_key=True,
            key_ttl=KEY_TTL,
            lookup=True,
            lookup_consistency="consistent",
            proves_absence=True,
            lists_windows=True,
            fetches_statements=True,
            executes=True,
            callbacks="stripe",
            report=REPORT.name,
        )

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]:
        problems = []
        if not secret_variable(config, "api_key", mode):
            problems.append(
                f"api_key_env must name the environment variable holding the Stripe secret key"
                f" of a {mode} tool (a name, or a table {{ test = …, live = … }})"
            )
        base_url = config.get("base_url", calls.DEFAULT_API)
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            problems.append("base_url must be an http(s) address (default https://api.stripe.com)")
        for key, least, most in _NUMBERS:
            value = config.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most
            ):
                problems.append(f"{key} must be a whole number from {least} to {most}")
        return problems

    # --- Calls -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return str(self.config.get("base_url") or "")

    def _client(self) -> Any:
        """The SDK's client with the tool's key, or why the key may not be used (a str)."""
        variable = secret_variable(self.config, "api_key", self.mode)
        key = self.secret("api_key")
        problem = calls.key_problem(key, self.mode, variable)
        return problem or calls.client(key, self.base_url, self.timeout)

    def _pages(
        self, sdk: Any, kind: str, start: datetime, end: datetime, most: int
    ) -> Iterator[list[dict[str, Any]] | Failure]:
        """Each page of the `kind`s created in [start, end) (whole seconds around it), newest
        first, fetched when the one before it has been taken; the `Failure` that stopped the
        listing comes last, in place of the page it could not have."""
        service = sdk.v1.payment_intents if kind == "payment_intent" else sdk.v1.refunds
        params: dict[str, Any] = {
            "limit": int(self.config.get("page_size", 100)),
            "created": {"gte": math.floor(start.timestamp()), "lt": math.ceil(end.timestamp())},
        }
        for _ in range(most):
            try:
                answer = service.list(params=params)
            except Exception as exc:  # the SDK's errors, and its failures to read an answer
                yield calls.failure(exc)
                return
            page = calls.page_of(answer, kind)
            yield page if isinstance(page, Failure) else page[0]
            if isinstance(page, Failure) or not page[1]:
                return
            params["starting_after"] = page[0][-1]["id"]
        yield Failure(f"more than {most} pages of {kind}s in the range")

    def _every(self, sdk: Any, kind: str, start: datetime, end: datetime) -> Any:
        """Every `kind` created in [start, end), or the `Failure` that stopped the listing: it
        counts only when every page was read, at most `max_pages` of them."""
        items: list[dict[str, Any]] = []
        most = int(self.config.get("max_pages", 100))
        for page in self._pages(sdk, kind, start, end, most):
            if isinstance(page, Failure):
                return page
            items += page
        return items

    # --- Lookup ----------------------------------------------------------------------------

    def lookup(self, effect: Effect) -> Lookup:
        sdk = self._client()
        if isinstance(sdk, str):
            return inconclusive(sdk)
        kind = "refund" if is_refund(effect.request or {}) else "payment_intent"
        skew = timedelta(seconds=int(self.config.get("clock_skew", 300)))
        listed = self._every(sdk, kind, effect.created_at - skew, timezone.now() + skew)
        if isinstance(listed, Failure):
            return inconclusive(listed.detail, retry_after=listed.retry_after)
        key = effect.idempotency_key
        ours = [item for item in listed if item["metadata"].get("ledger_key") == key]
        if any(item["metadata"].get("ledger_effect", str(effect.id)) != str(effect.id)
               for item in ours):  # fmt: skip
            return inconclusive(f"a {kind} carries our key under another effect's id")
        if not ours:
            return not_found(f"no {kind} with metadata[ledger_key] = our key", listed=True)
        if len(ours) > 1:
            refs = [item["id"] for item in ours]
            return duplicate(refs, f"Stripe holds {len(ours)} {kind}s under one key")
        item = ours[0]
        status = calls.settles_as(item)
        if not status:
            return inconclusive(f"{kind} {item['id']} has the unknown status {item['status']!r}")
        mismatches = differences(effect, calls.in_ledger_terms(item))
        return replace(found(item["id"], status, mismatches, answer=item), listed=True)

    # --- Windows (restore mode) -------------------------------------------------------------

    def list_window(self, start: datetime, end: datetime) -> Listing:
        """Every PaymentIntent and Refund created in [start, end) (whole seconds around it),
        each with the key it carried in `metadata[ledger_key]` as its reference, streamed: a
        page is fetched when the records before it have been read, so a window of any size
        holds one page in memory, and a page that cannot be had (or more than
        `window_max_pages` of a kind, default 10,000) raises `ListingBroken`."""
        sdk = self._client()
        if isinstance(sdk, str):
            return Listing(False, detail=sdk)
        return Listing(True, self._stream(sdk, start, end))

    def _stream(self, sdk: Any, start: datetime, end: datetime) -> Iterator[Record]:
        most = int(self.config.get("window_max_pages", 10_000))
        for kind in _KINDS:
            for page in self._pages(sdk, kind, start, end, most):
                if isinstance(page, Failure):
                    raise ListingBroken(f"{kind}s: {page.detail}")
                try:
                    records = [_record(item) for item in page]
                except ValueError as exc:
                    raise ListingBroken(f"{kind}s: {exc}") from None
                yield from records

    # --- Refunds the ledger sends ------------------------------------------------------------

    def execute(self, effect: Effect) -> Sent:
        """Refund what an operator (or a compensation) asked for, under the effect's key as
        Stripe's Idempotency-Key. A lost or unreadable answer is `unknown`: reconciliation asks
        Stripe by key before anything else."""
        from reconcilers.providers.stripe.sending import refund

        sdk = self._client()
        if isinstance(sdk, str):
            return Sent("not_sent", error={"detail": sdk})
        return refund(sdk, effect)

    def fetch_statement(self, period_start: datetime, period_end: datetime) -> tuple[str, bytes]:
        """Stripe's itemized balance change report of the period (`reporting`)."""
        return reporting.fetch_statement(self.config, self.mode, period_start, period_end)


def _record(item: dict[str, Any]) -> Record:
    """A listed PaymentIntent or Refund in the ledger's terms: amounts in the ISO 4217 minor
    units the ledger counts in (Stripe's own differ for a few currencies)."""
    status = _RECORD_STATUS.get(calls.settles_as(item))
    if status is None:
        raise ValueError(f"{item['id']} has the unknown status {item['status']!r}")
    currency = item["currency"].upper()
    places = EXPONENTS.get(currency)
    major = Decimal(calls.to_major(item["amount"], currency))
    return Record(
        provider_ref=item["id"],
        reference=str(item["metadata"].get("ledger_key") or ""),
        type="refund" if item["object"] == "refund" else "charge",
        status=status,
        amount_minor=int(major.scaleb(places)) if places is not None else item["amount"],
        currency=currency,
        occurred_at=calls.created_at(item),
    )
