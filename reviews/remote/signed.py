"""Signed, expiring, single-use links: Django's signing (a salt per purpose, `max_age`) says
who made the link and when; a `UsedLink` row, written when the link is used, makes it work
once. A link is used only by a signed-in person who may act on it: whoever fetches it before
that (a mail scanner, someone without the role) uses nothing up.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core import signing
from django.db import IntegrityError, transaction

from reviews.models import UsedLink


class LinkRefused(Exception):
    """A link that cannot be used: its status (404 not ours, 410 expired or used) and what the
    page says."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail


def read(token: str, *, salt: str, max_age: int) -> dict[str, Any]:
    """What the link carries, once its signature and age are checked, and unless it was used."""
    try:
        data = signing.loads(token, salt=salt, max_age=max_age)
    except signing.SignatureExpired:
        raise LinkRefused(
            410,
            "This link has expired",
            f"Links are valid for {_age(max_age)} after they are sent.",
        ) from None
    except signing.BadSignature:
        raise LinkRefused(
            404, "Not a link of this ledger", "The link is incomplete or was altered."
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("n"), str):
        raise LinkRefused(404, "Not a link of this ledger", "The link names nothing.")
    if (used := used_by(data["n"])) is not None:
        raise _used(used)
    return data


def use(nonce: str, purpose: str, user: User) -> None:
    """Mark the link used by `user`; `LinkRefused` when someone used it first."""
    try:
        with transaction.atomic():
            UsedLink.objects.create(nonce=nonce, purpose=purpose, used_by=user)
    except IntegrityError:
        raise _used(used_by(nonce)) from None


def used_by(nonce: str) -> UsedLink | None:
    return UsedLink.objects.select_related("used_by").filter(nonce=nonce).first()


def _used(used: UsedLink | None) -> LinkRefused:
    who = f" by {used.used_by.get_username()} at {used.used_at:%Y-%m-%d %H:%M} UTC" if used else ""
    return LinkRefused(
        410, "This link was used already", f"Each link works once; it was used{who}."
    )


def _age(seconds: int) -> str:
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    minutes = max(1, seconds // 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
