"""What changed on an effect since its page was rendered: the effect page's live check.

The check compares the page's state, carried in its polling URL, with the database's in one
query over indexed columns (`live_state`); only when something differs does it read what
changed and who changed it (`what_changed`), so that a page left open costs next to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db.models import BigIntegerField, Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from ledger.models import Effect, EffectEvent, ReviewItem
from reviews.models import NoteKind, ReviewNote
from reviews.queue.holds import hold_of


@dataclass(frozen=True)
class LiveState:
    """What the live check compares: the effect's version, its open item and that item's
    holder (ids, 0 for none), and how many notes the effect has."""

    version: int
    item: int
    holder: int
    notes: int

    @property
    def fingerprint(self) -> str:
        """The item part of the page's polling URL (`?item=`)."""
        return f"{self.item}.{self.holder}.{self.notes}"

    @classmethod
    def parse(cls, version: str, fingerprint: str) -> LiveState | None:
        """The state a page carries in its polling URL; None when it is not one."""
        parts = fingerprint.split(".")
        numbers = [version, *parts]
        if len(parts) != 3 or not all(n.isascii() and n.isdigit() and len(n) < 19 for n in numbers):
            return None
        return cls(*(int(n) for n in numbers))


def live_state(effect_id: Any) -> LiveState | None:
    """The effect's live state in one query: its primary key, the one-open-item unique index
    (review_one_open_uniq) and reviewnote_effect_idx. None for no such effect."""
    open_item = ReviewItem.objects.filter(effect=OuterRef("pk"), resolved_at__isnull=True)
    note_count = (
        ReviewNote.objects.filter(effect=OuterRef("pk"))
        .order_by()
        .values("effect")
        .annotate(n=Count("pk"))
        .values("n")
    )
    row = (
        Effect.objects.filter(pk=effect_id)
        .annotate(
            open_item=Coalesce(
                Subquery(open_item.values("pk")[:1]), 0, output_field=BigIntegerField()
            ),
            holder=Coalesce(
                Subquery(open_item.values("assignee")[:1]), 0, output_field=BigIntegerField()
            ),
            note_count=Coalesce(Subquery(note_count), 0, output_field=BigIntegerField()),
        )
        .values_list("version", "open_item", "holder", "note_count")
        .first()
    )
    return LiveState(*row) if row is not None else None


@dataclass(frozen=True)
class Change:
    """One thing that changed, as the banner says it: "{who} {what} at {when}{then}"."""

    who: str
    what: str
    when: datetime | None
    then: str = ""


def _name(actor: str, user: User) -> str:
    name = actor.removeprefix("operator:")
    return "you" if name == user.get_username() else name


def what_changed(effect_id: Any, seen: LiveState, now: LiveState, user: User) -> list[Change]:
    """What differs between the state the page showed and the current one, newest facts only:
    the latest move of the effect, the open item's holder, the notes added since."""
    changes = []
    if now.version != seen.version:
        event = EffectEvent.objects.filter(effect_id=effect_id).order_by("-id").first()
        status = Effect.objects.values_list("status", flat=True).get(pk=effect_id)
        if event is not None:
            decision = event.data.get("decision") if isinstance(event.data, dict) else None
            action = (
                Effect.objects.filter(pk=decision)
                .values_list("provenance__action", flat=True)
                .first()
                if decision
                else None
            )
            what = f"decided {action}" if action else f"recorded {event.kind}"
            changes.append(
                Change(_name(event.actor, user), what, event.created_at, f"now {status}")
            )
    if now.item == seen.item and now.holder != seen.holder and now.item:
        hold = hold_of(ReviewItem.objects.select_related("assignee").get(pk=now.item))
        if hold is not None:
            who = _name(hold.held_by.get_username(), user)
            changes.append(Change(who, "took this over", hold.held_at))
        else:
            changes.append(Change("", "The hold was released", None))
    elif now.item and now.item != seen.item:
        item = ReviewItem.objects.get(pk=now.item)
        changes.append(
            Change("", f"A review item opened ({item.get_reason_display()})", item.opened_at)
        )
    if now.notes > seen.notes:
        added = list(
            ReviewNote.objects.filter(effect_id=effect_id)
            .select_related("author")
            .order_by("-id")[: now.notes - seen.notes]
        )
        for note in reversed(added):
            what = (
                "added a note" if note.kind == NoteKind.NOTE else "lost a decision (kept as a note)"
            )
            changes.append(Change(_name(note.author.get_username(), user), what, note.created_at))
    return changes
