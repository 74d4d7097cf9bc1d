"""Who works on a review item: claiming an open item, assigning it, releasing the claim, and
what the claim means for someone else's decision (a soft lock: they decide over it only once
they have confirmed it)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models.functions import Now

from ledger.errors import Refused
from ledger.models import ReviewItem
from ledger.policy.roles import ADMIN
from reviews.access.checks import roles_of


class ClaimedByOther(Refused):
    code = "claimed_by_other"


class NotTheHolder(Refused):
    """Only whoever holds a claim, or an admin, may release it."""

    code = "not_the_holder"


class NotClaimed(Refused):
    """The item is resolved, or nobody holds it any more."""

    code = "not_claimed"


def claim_item(item: ReviewItem, user: Any) -> Any:
    """Take an open, unassigned item. Returns who holds it now (the caller, or whoever was
    first: the conditional UPDATE lets exactly one of two simultaneous claims through). The
    claim's time is the database's, as every other time on the item."""
    ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True, assignee__isnull=True).update(
        assignee=user, claimed_at=Now()
    )
    return ReviewItem.objects.select_related("assignee").get(pk=item.pk).assignee


def assign_item(item: ReviewItem, assignee: Any) -> bool:
    """Hand an open item to someone (reassigning is allowed). False when it was resolved.
    The new holder's claim starts now: the effect page says since when they work on it."""
    held_since = Now() if assignee is not None else None
    return bool(
        ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True).update(
            assignee=assignee, claimed_at=held_since
        )
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


def claim_refusal(item: ReviewItem | None, user: Any, over_claim: bool) -> ClaimedByOther | None:
    """Deciding on an item another operator holds needs their say-so: the asker must say they
    decide over the claim (the page's dialog asks)."""
    if item is None or item.assignee_id is None or item.assignee_id == user.pk or over_claim:
        return None
    return ClaimedByOther(
        f"{claim_text(item)}: decide over their claim only once you have confirmed it.",
        claimed_by=item.assignee.get_username(),
        claimed_at=item.claimed_at.isoformat() if item.claimed_at else None,
    )


def claim_text(item: ReviewItem) -> str:
    """ "olga is working on this since 10:02" (or without the time: an item assigned before
    claims were timed)."""
    since = item.claimed_at
    text = f"{item.assignee.get_username()} is working on this"
    return f"{text} since {since:%H:%M}" if since else text
