"""The review queue: one page of it, and who works on an item (claiming and assigning; opening
one is `ledger.reviewqueue`).

A page is read in two steps so that its cost does not grow with the queue: the ids of the page's
items are selected from the review-item table alone (every filter but the effect's status reads
copies on the item, and each has a partial index over open items, `ledger.models.review`), and
only those rows are then fetched with their effects, agents and people, with just the columns
the queue shows. How many items match is counted only up to `COUNT_CAP`: past it, the page says
"more than", and paging goes on as long as there is a next item.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from ledger.models import ReviewItem

PAGE_SIZE = 50
COUNT_CAP = 10_000
# Past the count's cap a page number is trusted as given, up to this (an OFFSET stays an int).
LAST_PAGE = 1_000_000

# What a row of the queue shows: the item, its effect's key and status, the agent's and the
# people's names. Everything else (requests, responses, provenance) stays in the database.
_SHOWN = (
    "effect",
    "effect__effect_key",
    "effect__status",
    "reason",
    "severity",
    "opened_at",
    "due_at",
    "resolved_at",
    "tool",
    "run_id",
    "agent",
    "agent__name",
    "assignee",
    "assignee__username",
    "resolved_by",
    "resolved_by__username",
)


@dataclass(frozen=True)
class QueuePage:
    """One page of matching items, in the queue's order."""

    items: list[ReviewItem]
    number: int
    count: int  # items that match, counted up to `cap` + 1
    cap: int
    has_next: bool

    @property
    def capped(self) -> bool:
        return self.count > self.cap

    @property
    def num_pages(self) -> int | None:
        """How many pages there are; None past the count's cap."""
        return None if self.capped else max(1, -(-self.count // PAGE_SIZE))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1

    def __iter__(self) -> Iterator[ReviewItem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> ReviewItem:
        return self.items[index]


def page_number(asked: str | None) -> int:
    """The page a query string asks for: 1 for anything that is not a positive number."""
    try:
        return min(max(int(asked or 1), 1), LAST_PAGE)
    except ValueError:
        return 1


def open_page(matching: QuerySet[ReviewItem], number: int) -> QueuePage:
    """Page `number` of `matching` (filtered and ordered), moved back to the last page when
    the count shows it is past the end. Three queries, however long the queue."""
    cap = COUNT_CAP
    count = matching.order_by()[: cap + 1].count()
    if count <= cap:
        number = min(number, max(1, -(-count // PAGE_SIZE)))
    start = (number - 1) * PAGE_SIZE
    ids = list(matching.values_list("id", flat=True)[start : start + PAGE_SIZE + 1])
    return QueuePage(
        items=rows(ids[:PAGE_SIZE]),
        number=number,
        count=count,
        cap=cap,
        has_next=len(ids) > PAGE_SIZE,
    )


def rows(ids: Sequence[int]) -> list[ReviewItem]:
    """The items with these ids, as the queue shows them, in the order given."""
    found = ReviewItem.objects.filter(pk__in=ids).select_related(
        "effect", "agent", "assignee", "resolved_by"
    )
    by_id = {item.pk: item for item in found.only(*_SHOWN)}
    return [by_id[pk] for pk in ids if pk in by_id]


def claim_item(item: ReviewItem, user: Any) -> Any:
    """Take an open, unassigned item. Returns who holds it now (the caller, or whoever was
    first: the conditional UPDATE lets exactly one of two simultaneous claims through)."""
    ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True, assignee__isnull=True).update(
        assignee=user
    )
    return ReviewItem.objects.select_related("assignee").get(pk=item.pk).assignee


def assign_item(item: ReviewItem, assignee: Any) -> bool:
    """Hand an open item to someone (reassigning is allowed). False when it was resolved."""
    return bool(
        ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True).update(assignee=assignee)
    )
