"""The Stripe adapter: payments (PaymentIntents) and refunds, asked about through Stripe's SDK.

How an effect travels to Stripe: the agent creates the PaymentIntent (the ledger sends
refunds itself, `execute`) with the effect's idempotency key as Stripe's `Idempotency-Key`
and the effect's identity in the object's metadata: `metadata[ledger_key]` (the idempotency
key), `metadata[ledger_effect]` (the effect's id) and `metadata[ledger_target]` (its target,
unless the PaymentIntent's `customer` is the target).

How it is found again: a PaymentIntent first through Stripe's Search API by its
`metadata[ledger_key]` (`search`; the configuration's `search = false` turns it off). Stripe's
search is eventually consistent, so it can find but never prove absence: one intent it names
(read again by id) with our key, our effect's id if it carries one and a status the ledger
knows is found, two or more are a duplicate, and anything else (nothing yet, an error, a 429)
leaves the lookup to the listing, whose not-found cannot stand against an intent search
showed under our key. Refunds, which Stripe cannot search, always go to the listing.

The listing: the *list* endpoints (`GET /v1/payment_intents`, `GET /v1/refunds`), which are
read-after-write consistent, over a creation range, every page, then the records whose
`metadata[ledger_key]` is ours. A not-found is a complete listing (`listed`) and proves
absence; one record is found (its amount and currency compared with the request's,
`ledger.rules.matching.differences`), two are a duplicate; anything short of every page (an
error, a 429, a timeout, a page of an unexpected shape, more pages than `max_pages`) is
inconclusive.

The range (`_span`) holds every moment the effect's request could have reached Stripe, less
and plus `clock_skew` (default 5 minutes) for the two clocks: from the effect's creation (or
from when a copy of it on a branch a restore lost could have been sent, if earlier,
`ledger.rules.reach`) to the end of its last dispatch plus the tool's `settle_after`, or now if
that is sooner. The last dispatch ends where the ledger's proof of absence says it does
(`ledger.rules.lookup_absence.last_dispatch_end`): the lease's end while the effect is still
`dispatching` (heartbeats move it, and a client starts no call it cannot finish inside it),
else when it left `dispatching` (its report, or its lease's end; an `awaiting_confirmation`
intent was created before then, only its status moves later), else the lost branch's reach.
A request still on its way at that end lands within `settle_after` in the ledger's reckoning,
which is also when a not-found can first prove anything. So a lookup taken hours after a crash
reads what was created around the dispatch, not all that came since. A tail check (an effect
already resolved, `reconcilers.tailcheck`) looks for a first request that landed after every
bound: it lists up to now, and never trusts search.

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
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from django.db import DatabaseError, connection
from django.utils import timezone

from ledger.models import Effect
from ledger.models.states import CHECKED
from ledger.policy.iso4217 import EXPONENTS
from ledger.policy.tools import policy_for
from ledger.rules.lookup_absence import last_dispatch_end, settle_after
from ledger.rules.matching import differences, is_refund
from ledger.rules.reach import lost_dispatch
from ledger.statements.formats import ReportFormat
from reconcilers.providers.base import AdapterBase, Backing, secret_variable
from reconcilers.providers.outcomes import (
    DUPLICATE,
    FOUND,
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
from reconcilers.providers.stripe import calls, reporting, search
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
        # The same with `search` on or off: search only ever finds, a not-found still comes
        # from the consistent listing alone, so nothing waits on the search index's lag.
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
        if not isinstance(config.get("search", True), bool):
            problems.append("search must be true or false (whether lookups search first)")
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
        named: list[dict[str, Any]] = []
        if kind == "payment_intent" and self._searches(effect):
            searched = _searched(sdk, effect)
            if isinstance(searched, Lookup):
                return searched
            named = searched
        span = self._span(effect)
        if isinstance(span, str):
            return inconclusive(span)
        listed = self._every(sdk, kind, *span)
        if isinstance(listed, Failure):
            return inconclusive(listed.detail, retry_after=listed.retry_after)
        key = effect.idempotency_key
        ours = [item for item in listed if item["metadata"].get("ledger_key") == key]
        if not ours and named:
            refs = ", ".join(item["id"] for item in named)
            return inconclusive(f"search names {refs} under our key, outside the range listed")
        if not ours:
            return not_found(f"no {kind} with metadata[ledger_key] = our key", listed=True)
        return _judged(effect, kind, ours, listed=True)

    def _searches(self, effect: Effect) -> bool:
        """Whether the lookup searches first: unless the configuration says not to, and never
        for a tail check (an effect resolved since: the check is for a second record, which
        the index may not show yet)."""
        return self.config.get("search", True) is not False and effect.status in CHECKED

    def _span(self, effect: Effect) -> tuple[datetime, datetime] | str:
        """The creation range the listing reads (the module docstring says why), or why it
        could not be set."""
        skew = timedelta(seconds=int(self.config.get("clock_skew", 300)))
        now = timezone.now()
        try:
            lost, settle = _dispatch_facts(effect)
        except DatabaseError as exc:
            return f"the lookup's range could not be set: {type(exc).__name__}"
        start = min(effect.created_at, lost[0]) if lost else effect.created_at
        if effect.status not in CHECKED:
            return start - skew, now + skew  # a tail check: up to now
        end = min(now, last_dispatch_end(effect, now, lost) + settle)
        return start - skew, end + skew

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


def _searched(sdk: Any, effect: Effect) -> Lookup | list[dict[str, Any]]:
    """The lookup as Stripe's search settles it (found, or a duplicate); else what it named
    under our key that settles nothing (another effect's id, a status the ledger does not
    know; none when it named none or failed). The listing then decides (`search`), and a
    not-found of the listing cannot stand against an intent search showed."""
    ours = search.intents(sdk, effect.idempotency_key)
    if isinstance(ours, Failure):
        return []
    answer = _judged(effect, "payment_intent", ours, listed=False)
    if answer.outcome not in (FOUND, DUPLICATE):
        return ours
    said = [answer.detail, "named by Stripe's search, read again by id"]
    return replace(answer, detail="; ".join(filter(None, said)))


def _judged(effect: Effect, kind: str, ours: list[dict[str, Any]], *, listed: bool) -> Lookup:
    """What one or more records carrying our key say: found, a duplicate, or inconclusive
    (one carries another effect's id, or a status the ledger does not know)."""
    if any(item["metadata"].get("ledger_effect", str(effect.id)) != str(effect.id)
           for item in ours):  # fmt: skip
        return inconclusive(f"a {kind} carries our key under another effect's id")
    if len(ours) > 1:
        refs = [item["id"] for item in ours]
        return duplicate(refs, f"Stripe holds {len(ours)} {kind}s under one key")
    item = ours[0]
    status = calls.settles_as(item)
    if not status:
        return inconclusive(f"{kind} {item['id']} has the unknown status {item['status']!r}")
    mismatches = differences(effect, calls.in_ledger_terms(item))
    return replace(found(item["id"], status, mismatches, answer=item), listed=listed)


def _dispatch_facts(effect: Effect) -> tuple[tuple[datetime, datetime] | None, timedelta]:
    """What the ledger knows of the effect's dispatches beyond its row: when a copy of it on a
    branch a restore lost could have been sent (`ledger.rules.reach`), and how long after a
    dispatch its request may still land (the tool's `settle_after`). Lookups run in a pool of
    threads: a connection this opens in one of them is closed again, not left to the thread."""
    pooled = threading.current_thread() is not threading.main_thread()
    try:
        return lost_dispatch([effect.id]).get(effect.id), settle_after(policy_for(effect.tool))
    finally:
        if pooled and not connection.in_atomic_block:
            connection.close()


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
