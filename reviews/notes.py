"""Notes on review items, who is working on one (the soft lock a claim is), and what changed
on an effect since its page was rendered (the page's live check).

Notes are append-only (a trigger refuses edits and deletions, `reviews.models.notes`) and live
beside the event log rather than in it: they are what people told each other, not something
that happened to the effect, so they neither move its version nor enter the sealed chain. The
effect page shows every note of every item of the effect to anyone who may read it, which is
where an auditor reads them.

The live check compares the page's state, carried in its polling URL, with the database's in
one query over indexed columns (`live_state`); only when something differs does it read what
changed and who changed it (`what_changed`), so that a page left open costs next to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db.models import BigIntegerField, Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from ledger.errors import Refused, ValidationFailed
from ledger.models import Effect, EffectEvent, ReviewItem
from ledger.policy.roles import ADMIN
from ledger.policy.tools import policy_for
from reviews.access import can_act, roles_of
from reviews.models import NoteKind, ReviewNote

# A note is a message to colleagues, not a document: long evidence belongs in a decision.
MAX_NOTE = 2000


class NotTheHolder(Refused):
    """Only whoever holds a claim, or an admin, may release it."""

    code = "not_the_holder"


class NotClaimed(Refused):
    """The item is resolved, or nobody holds it any more."""

    code = "not_claimed"


def add_note(item: ReviewItem, user: User, text: str) -> ReviewNote:
    """Keep `text` as `user`'s note on the item, card numbers redacted as in decisions' reasons.
    Raises `ValidationFailed` (422) for an empty or too long note."""
    text = text.strip()
    if not text:
        raise ValidationFailed("Write the note first: it is empty.", {"text": "required"})
    if len(text) > MAX_NOTE:
        raise ValidationFailed(
            f"A note holds at most {MAX_NOTE} characters; this one has {len(text)}.",
            {"text": f"at most {MAX_NOTE} characters"},
        )
    effect = Effect.objects.only("tool").get(pk=item.effect_id)
    redacted = policy_for(effect.tool).redactor.text(text)
    return ReviewNote.objects.create(
        item=item, effect_id=item.effect_id, author=user, text=redacted
    )


def keep_lost_decision(effect_id: Any, user: User, ask: Any, refusal: Refused) -> ReviewNote | None:
    """Keep the evidence of a decision that lost a race as a note on the item the operator was
    looking at (the open one, or else the one most recently resolved, by the winner): what
    they typed is often the result of a call to the provider, too costly to lose. None when
    the effect has no review item to carry it."""
    items = ReviewItem.objects.filter(effect_id=effect_id)
    item = (
        items.filter(resolved_at__isnull=True).first()
        or items.filter(resolved_at__isnull=False).order_by("-resolved_at", "-pk").first()
    )
    if item is None:
        return None
    won_by = str(refusal.extra.get("decided_by") or "")
    redactor = policy_for(Effect.objects.only("tool").get(pk=effect_id).tool).redactor
    details = redactor(
        {
            "action": ask.action,
            "reason": ask.reason,
            "evidence": ask.evidence,
            "provider_ref": ask.provider_ref,
            "won_by": won_by,
            "refusal": refusal.code,
        }
    )
    beaten = f"after {won_by} decided first" if won_by else "after the effect changed"
    text = f"Lost decision ({ask.action}), {beaten}: {ask.reason}".strip()
    return ReviewNote.objects.create(
        item=item,
        effect_id=effect_id,
        author=user,
        kind=NoteKind.LOST_DECISION,
        text=redactor.text(text)[:MAX_NOTE],
        details=details,
    )


def release_item(item: ReviewItem, user: User) -> None:
    """Give up the claim on an open item: the holder may, and an admin (for a holder who went
    home). A conditional UPDATE, so a release never clears a claim someone took meanwhile."""
    held = ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True, assignee__isnull=False)
    if ADMIN not in roles_of(user):
        held = held.filter(assignee=user)
    if held.update(assignee=None, claimed_at=None):
        return
    current = ReviewItem.objects.select_related("assignee").get(pk=item.pk)
    if current.resolved_at is not None or current.assignee is None:
        raise NotClaimed("Nobody holds this item any more.")
    raise NotTheHolder(
        f"{current.assignee} holds this item: only they or an admin may release it.",
        holder=current.assignee.get_username(),
    )


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
        item = ReviewItem.objects.select_related("assignee").get(pk=now.item)
        if item.assignee is not None:
            who = _name(item.assignee.get_username(), user)
            changes.append(Change(who, "took this over", item.claimed_at))
        else:
            changes.append(Change("", "The claim was released", None))
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


def panel(effect: Any, open_item: Any, user: Any) -> dict[str, Any]:
    """Context for the effect page's notes-and-ownership panel (`reviews/_item_panel.html`) and
    its live check (`reviews/_live.html`): every note of every item of the effect, oldest
    first; the item a new note goes on (the open one, else the latest); who holds the open
    item, since when, and whether this user may claim or release it."""
    notes = list(
        ReviewNote.objects.filter(effect_id=effect.pk).select_related("author").order_by("id")
    )
    item = open_item or (
        ReviewItem.objects.filter(effect_id=effect.pk).order_by("-opened_at", "-pk").first()
    )
    holder = open_item.assignee if open_item is not None else None
    acts = can_act(user)
    state = LiveState(
        version=effect.version,
        item=open_item.pk if open_item is not None else 0,
        holder=holder.pk if holder is not None else 0,
        notes=len(notes),
    )
    return {
        "panel": {
            "notes": notes,
            "item": item,
            "open_item": open_item,
            "holder": holder,
            "claimed_at": open_item.claimed_at if open_item is not None else None,
            "can_note": acts and item is not None,
            "can_claim": acts and open_item is not None and holder is None,
            "can_release": holder is not None and (holder.pk == user.pk or ADMIN in roles_of(user)),
            "max_note": MAX_NOTE,
        },
        "live_fingerprint": state.fingerprint,
    }
