"""Notes on review items, and the effect page's panel of notes and who is working on the item.

Notes are append-only (a trigger refuses edits and deletions, `reviews.models.notes`) and live
beside the event log rather than in it: they are what people told each other, not something
that happened to the effect, so they neither move its version nor enter the sealed chain. The
effect page shows every note of every item of the effect to anyone who may read it, which is
where an auditor reads them.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from ledger.errors import Refused, ValidationFailed
from ledger.models import Effect, ReviewItem
from ledger.policy.tools import policy_for
from reviews.access.checks import can_act
from reviews.models import NoteKind, ReviewNote
from reviews.queue.holds import hold_of, may_release
from reviews.queue.live import LiveState

# A note is a message to colleagues, not a document: long evidence belongs in a decision.
MAX_NOTE = 2000


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


def panel(effect: Any, open_item: Any, user: Any) -> dict[str, Any]:
    """Context for the effect page's notes-and-ownership panel (`reviews/_item_panel.html`) and
    its live check (`reviews/_live.html`): every note of every item of the effect, oldest
    first; the item a new note goes on (the open one, else the latest); who holds the open
    item, since when, and whether this user may hold or release it (`reviews.queue.holds`)."""
    notes = list(
        ReviewNote.objects.filter(effect_id=effect.pk).select_related("author").order_by("id")
    )
    item = open_item or (
        ReviewItem.objects.filter(effect_id=effect.pk).order_by("-opened_at", "-pk").first()
    )
    hold = hold_of(open_item)
    holder = hold.held_by if hold is not None else None
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
            "held_at": hold.held_at if hold is not None else None,
            "can_note": acts and item is not None,
            "can_hold": acts and open_item is not None and hold is None,
            "can_release": may_release(hold, user),
            "max_note": MAX_NOTE,
        },
        "live_fingerprint": state.fingerprint,
    }


def item_panel(item: ReviewItem, user: Any) -> dict[str, Any]:
    """The panel of the item's effect as it is now, after a note or a release: its context,
    with the effect."""
    effect = Effect.objects.get(pk=item.effect_id)
    open_item = (
        ReviewItem.objects.filter(effect=effect, resolved_at__isnull=True)
        .select_related("assignee")
        .first()
    )
    return {"effect": effect, **panel(effect, open_item, user)}
