"""What a provider adapter answers (`reconcilers.providers.base` says what it is).

An adapter answers one question after a crash: did the provider do this effect? `lookup`
returns found (with the provider's reference and what it recorded), not found, duplicate (two
or more records under our one reference), or inconclusive. `listed` says the answer came from
a list search: only such a not-found can prove that the provider never got the request
(`lookup_proves_absence`); a 404 or a single-object answer cannot. It never raises for
anything the provider says or fails to say: timeouts, 5xx, garbage and answers that do not
echo our key are all inconclusive. Adapters are called outside any database transaction.

Adapters that can also list what the provider did in a time window (`list_window(start, end)`,
a `Listing`) let restore mode account for a window the ledger's database lost
(`reconcilers.gapsweep`). The same rule holds: anything short of every page is incomplete. A
long listing may be streamed: its records an iterator that fetches page after page as it is
read and raises `ListingBroken` at the first page it cannot have, so that no more than a page
is held at a time; such a listing is complete only once read to its end, and whatever was done
with the records it yielded before it broke is undone (`ledger.restore.gap.account_for` does
it all in one transaction).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

FOUND, NOT_FOUND, DUPLICATE, INCONCLUSIVE = "found", "not_found", "duplicate", "inconclusive"


@dataclass(frozen=True)
class Lookup:
    outcome: Literal["found", "not_found", "duplicate", "inconclusive"]
    detail: str = ""
    provider_ref: str = ""
    # Only for `found`: "confirmed", "failed" or "pending" as the provider sees it.
    status: str = ""
    # Only for `found`: where what the provider recorded differs from our request.
    mismatches: tuple[str, ...] = ()
    answer: Any = None
    # The answer was a list of every record under our reference (see the module docstring).
    listed: bool = False
    # Only for `duplicate`: the provider's references of the records it holds under ours.
    refs: tuple[str, ...] = ()
    # Only for `inconclusive`: the provider asked to be asked again no sooner than this many
    # seconds from now (a 429's Retry-After).
    retry_after: float | None = None

    def evidence(self) -> dict[str, Any]:
        """What the event log keeps of this answer."""
        shown = {
            "outcome": self.outcome,
            "detail": self.detail[:500],
            "provider_ref": self.provider_ref,
            "status": self.status,
            "mismatches": list(self.mismatches),
            "listed": self.listed,
        }
        if self.refs:
            shown["refs"] = list(self.refs)
        return shown


def found(ref: str, status: str, mismatches: list[str] | None = None, answer: Any = None) -> Lookup:
    return Lookup(
        FOUND, provider_ref=ref, status=status, mismatches=tuple(mismatches or ()), answer=answer
    )


def not_found(detail: str = "", *, listed: bool = False) -> Lookup:
    return Lookup(NOT_FOUND, detail=detail, listed=listed)


def duplicate(refs: list[str], detail: str = "") -> Lookup:
    return Lookup(DUPLICATE, detail=detail, refs=tuple(refs), listed=True)


def inconclusive(detail: str, *, retry_after: float | None = None) -> Lookup:
    return Lookup(INCONCLUSIVE, detail=detail, retry_after=retry_after)


@dataclass(frozen=True)
class Sent:
    """What the provider said to a request the ledger itself sent (`execute`), as an outcome
    the lease holder reports: confirmed, failed, unknown, awaiting_confirmation or not_sent."""

    status: str
    provider_ref: str = ""
    response: Any = None
    error: Any = None


@dataclass(frozen=True)
class Record:
    """One record the provider lists for a time window (`list_window`), in the ledger's terms:
    `reference` is the idempotency key the provider kept for it ("" when it keeps none)."""

    provider_ref: str
    reference: str
    type: str  # charge | refund | capture | reversal | fee
    status: str  # succeeded | pending | failed
    amount_minor: int
    currency: str
    occurred_at: datetime


@dataclass(frozen=True)
class Listing:
    """What a provider listed for a window: complete (every record, all pages), or not, with
    why. Only a complete listing can account for the window. `records` is a tuple, or an
    iterator of pages still to fetch (see the module docstring): then `complete` means
    "complete unless reading it raises `ListingBroken`"."""

    complete: bool
    records: Iterable[Record] = ()
    detail: str = ""


class ListingBroken(Exception):
    """A streamed listing could not be read to its end (a page missing, the provider down):
    it is not complete, and nothing may be concluded from the records it yielded."""


class StatementFetchError(Exception):
    """The provider did not hand over a statement (unreachable, an error status)."""
