"""Who works on a review item: an operator's *hold* on it.

An operator holds an open item (`hold_item`), or is given it (`assign_item`), and releases it
(`release_item`). A hold does not stop anyone: someone else decides on the item only once they
have confirmed they decide over it (`hold_refusal`; the effect page's dialog asks). It is not an
agent's *claim* of an effect (`POST /api/v1/effects/{id}/claim`), which takes the effect's lease
to send it; the two never meet.

The hold lives on the ledger's `ReviewItem`: `assignee` is who holds it and `held_at` since
when; `hold_of` reads both as a `Hold`. A decision made over someone's hold records the flag
under its first name, `over_claim` (`reviews.decisions.decide`): recorded data keeps its keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db.models.functions import Now

from ledger.errors import Refused
from ledger.models import ReviewItem
from ledger.policy.roles import ADMIN
from reviews.access.checks import roles_of


class HeldByOther(Refused):
    """Another operator holds the item: deciding over their hold needs the asker's say-so."""

    code = "held_by_other"


class NotTheHolder(Refused):
    """Only whoever holds an item, or an admin, may release it."""

    code = "not_the_holder"


class NotHeld(Refused):
    """The item is resolved, or nobody holds it any more."""

    code = "not_held"


@dataclass(frozen=True)
class Hold:
    """Who holds an open item, and since when (None for an item assigned before holds were
    timed)."""

    held_by: User
    held_at: datetime | None


def hold_of(item: ReviewItem | None) -> Hold | None:
    """The hold on `item` (its assignee loaded), or None when nobody holds it."""
    if item is None or item.assignee_id is None:
        return None
    return Hold(held_by=item.assignee, held_at=item.held_at)


def hold_item(item: ReviewItem, user: Any) -> Any:
    """Hold an open item nobody holds. Returns who holds it now (the caller, or whoever was
    first: the conditional UPDATE lets exactly one of two simultaneous holds through). The
    hold's time is the database's, as every other time on the item."""
    ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True, assignee__isnull=True).update(
        assignee=user, held_at=Now()
    )
    return ReviewItem.objects.select_related("assignee").get(pk=item.pk).assignee


def assign_item(item: ReviewItem, assignee: Any) -> bool:
    """Hand an open item to someone (reassigning is allowed). False when it was resolved.
    The new holder's hold starts now: the effect page says since when they work on it."""
    held_since = Now() if assignee is not None else None
    return bool(
        ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True).update(
            assignee=assignee, held_at=held_since
        )
    )


def may_release(hold: Hold | None, user: Any) -> bool:
    """The holder may release their hold, and an admin anyone's (for a holder who went
    home)."""
    return hold is not None and (hold.held_by.pk == user.pk or ADMIN in roles_of(user))


def release_item(item: ReviewItem, user: User) -> None:
    """Release the hold on an open item (`may_release` says who may). A conditional UPDATE, so
    a release never clears a hold someone took meanwhile."""
    held = ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True, assignee__isnull=False)
    if ADMIN not in roles_of(user):
        held = held.filter(assignee=user)
    if held.update(assignee=None, held_at=None):
        return
    current = ReviewItem.objects.select_related("assignee").get(pk=item.pk)
    if current.resolved_at is not None or current.assignee is None:
        raise NotHeld("Nobody holds this item any more.")
    raise NotTheHolder(
        f"{current.assignee} holds this item: only they or an admin may release it.",
        holder=current.assignee.get_username(),
    )


def hold_refusal(item: ReviewItem | None, user: Any, over_hold: bool) -> HeldByOther | None:
    """Deciding on an item another operator holds needs the asker's say-so: they must say
    they decide over the hold (the page's dialog asks)."""
    hold = hold_of(item)
    if hold is None or hold.held_by.pk == user.pk or over_hold:
        return None
    return HeldByOther(
        f"{hold_text(hold)}: decide over their hold only once you have confirmed it.",
        held_by=hold.held_by.get_username(),
        held_at=hold.held_at.isoformat() if hold.held_at else None,
    )


def hold_text(hold: Hold) -> str:
    """ "olga is working on this since 10:02" (or without the time: an item assigned before
    holds were timed)."""
    text = f"{hold.held_by.get_username()} is working on this"
    return f"{text} since {hold.held_at:%H:%M}" if hold.held_at else text
