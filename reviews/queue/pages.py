"""The review queue: one page of it, its exact-match search, what a row shows, the page's
fingerprint for live refreshes, and who works on an item (holding and assigning,
`reviews.queue.holds`; opening one is
`ledger.rules.reviewqueue`).

A page is read in two steps so that its cost does not grow with the queue: the ids of the page's
items are selected from the review-item table alone (every filter but the effect's status reads
copies on the item, and each has a partial index over open items, `ledger.models.review`), and
only those rows are then fetched with their effects, agents and people, with just the columns
the queue shows. How many items match is counted only up to `COUNT_CAP`: past it, the page says
"more than", and paging goes on as long as there is a next item.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from ledger.models import Effect, ReviewItem
from ledger.policy.iso4217 import major_units
from reviews.access.teams import visible_effects
from reviews.decisions.suggest import suggest_for_rows
from reviews.templatetags.times import FORMAT

PAGE_SIZE = 50
COUNT_CAP = 10_000
# Past the count's cap a page number is trusted as given, up to this (an OFFSET stays an int).
LAST_PAGE = 1_000_000

# Matching effects a search looks at, at most: an exact match on a target or a run can name
# many effects, and the page shows 50 of their items anyway.
SEARCH_LIMIT = 1_000

# What a row of the queue shows: the item, its effect's key, status, version (for the live
# fingerprint) and what is at stake, the agent's and the people's names; and what the row's
# suggestion weighs (`reviews.decisions.suggest`: attempts, tool, reference, age, and the
# request, whose amount a suggested refund repeats). Everything else (responses, provenance)
# stays in the database.
_SHOWN = (
    "effect",
    "effect__effect_key",
    "effect__status",
    "effect__version",
    "effect__target",
    "effect__amount_minor",
    "effect__currency",
    "effect__kind",
    "effect__tool",
    "effect__attempt",
    "effect__max_attempts",
    "effect__provider_ref",
    "effect__created_at",
    "effect__request",
    "effect_created_at",
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


def dress(items: Sequence[ReviewItem], now: datetime | None = None) -> None:
    """Give each row what it shows beyond its columns: the effect's real age, what is at stake,
    and the decision the evidence suggests (one batch of queries for the whole page,
    `reviews.decisions.suggest.suggest_for_rows`)."""
    now = now or timezone.now()
    suggestions = suggest_for_rows(items) if items else {}
    # Each row's three addresses from one reversal each (a `{% url %}` per row and link is a
    # tenth of the page's rendering).
    effect_url = _address("effect", _SOME_UUID)
    hold_url, assign_url = (_address(name, _SOME_ID) for name in ("review-hold", "review-assign"))
    for item in items:
        effect = item.effect
        item.effect_url = effect_url.format(item.effect_id)
        item.hold_url = hold_url.format(item.pk)
        item.assign_url = assign_url.format(item.pk)
        created = item.effect_created_at or item.opened_at
        item.age = age(created, now)
        item.created_text = timezone.localtime(created).strftime(FORMAT)
        item.amount = (
            major_units(effect.amount_minor, effect.currency)
            if effect.amount_minor is not None and effect.currency
            else ""
        )
        item.suggested = suggestions.get(item.pk)


# Arguments no real row has, reversed once and replaced by each row's own.
_SOME_UUID = uuid.UUID("0123abcd-0123-4567-89ab-0123456789ab")
_SOME_ID = 987654321


def _address(name: str, argument: Any) -> str:
    """The URL of `name` as a format string with one `{}` where its argument goes."""
    return reverse(name, args=[argument]).replace(str(argument), "{}")


def age(since: datetime, now: datetime) -> str:
    """How long ago, in the unit an operator weighs it in: "12 min", "25 h", "9 d". An item
    escalated after a day reads "25 h", not the "0 minutes" since it was opened."""
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 72 * 3600:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def search_effects(text: str) -> QuerySet[Effect]:
    """Effects whose id, idempotency key, provider reference, target or run is exactly `text`.
    Each is an indexed equality (the primary key, effect_idem_key_idx, effect_provider_ref_idx,
    effect_target_idx, effect_run_idx), so PostgreSQL ORs five index scans; a text that is not
    a UUID simply does not look at the ids."""
    text = text.strip()
    match = Q(idempotency_key=text) | Q(provider_ref=text) | Q(target=text) | Q(run_id=text)
    with contextlib.suppress(ValueError):
        match |= Q(pk=uuid.UUID(text))
    return Effect.objects.filter(match)


def search(items: QuerySet[ReviewItem], text: str) -> QuerySet[ReviewItem]:
    """The items of the effects `text` names exactly (through the items' effect index)."""
    found = search_effects(text).values("id")[:SEARCH_LIMIT]
    return items.filter(effect__in=found)


def unlisted(
    items: QuerySet[ReviewItem], text: str, user: Any = None, limit: int = 10
) -> list[Effect]:
    """Effects the search names whose items `items` (the queue's filtered set) does not hold:
    no review item at all, or one the state filter leaves out. The page links them; only
    effects `user` may see (their teams', ADR 0014)."""
    listed = items.order_by().values("effect_id")
    found = search_effects(text).exclude(pk__in=listed).only("id", "effect_key", "status")
    if user is not None:
        found = visible_effects(user, found)
    return list(found.order_by("created_at")[:limit])


def fingerprint(page: QueuePage) -> str:
    """A digest of what the page shows that someone else's action changes: which items, their
    effects' versions (every transition bumps one), who holds them, whether they are resolved.
    A live refresh whose fingerprint is unchanged answers 204 and swaps nothing."""
    parts = [str(page.count), str(page.number)]
    for item in page.items:
        parts.append(
            f"{item.pk}:{item.effect.version}:{item.assignee_id}:{item.resolved_at}:{item.severity}"
        )
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
