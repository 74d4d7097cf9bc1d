"""An alert email's decision links: one per decision the effect page offers, each signed
(Django's signing, salted for this purpose, valid `LEDGER_EMAIL_LINK_MAX_AGE`) and used once
(`reviews.remote.signed`).

A link never decides. Following it needs the person's sign-in; then, if they may act on the
effect and the decision is still offered to them, the link is used up and the effect page opens
with that decision's form open and pre-filled (`?decide=<action>`), where the page's own form
and confirmation record it (`Ask.channel` "email", from the form's `channel` field). The page
behind `/links/<token>` is `reviews.remote.pages.follow`.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import signing
from django.urls import reverse

from reviews.remote.offers import effect_of_alert, offer_for
from reviews.remote.signed import LinkRefused

log = logging.getLogger("reviews.remote")

SALT = "reviews.remote.emaillinks"
PURPOSE = "decide"
# The session's note of the decision forms opened from an email link, so that the decision
# recorded from one names its channel, "email": {effect id: action}.
OPENED = "email_links"


@dataclass(frozen=True)
class Target:
    """What a link opens: a decision on an effect, as its alert's review item offered it."""

    effect_id: uuid.UUID
    action: str
    item_id: int | None
    nonce: str


def token_for(effect_id: Any, action: str, item_id: int | None) -> str:
    data = {"e": str(effect_id), "a": action, "i": item_id, "n": secrets.token_urlsafe(16)}
    return signing.dumps(data, salt=SALT, compress=True)


def url_for(token: str) -> str:
    path = reverse("email-link", kwargs={"token": token})
    return settings.LEDGER_ALERT_LINK_BASE.rstrip("/") + path


def target_of(data: dict[str, Any]) -> Target:
    """The link's target, from its signed data (`reviews.remote.signed.read`)."""
    item, action = data.get("i"), data.get("a")
    try:
        effect_id = uuid.UUID(str(data.get("e")))
    except ValueError:
        effect_id = None
    if effect_id is None or not isinstance(action, str) or not (item is None or type(item) is int):
        raise LinkRefused(404, "Not a link of this ledger", "The link names no decision.")
    return Target(effect_id, action, item, data["n"])


def lines_for(payload: dict[str, Any]) -> list[str]:
    """The email's lines offering each decision, with its link and what it leads to; none for
    an alert about no effect with an open review item, or with links turned off."""
    if not settings.LEDGER_EMAIL_LINKS:
        return []
    try:
        found = effect_of_alert(payload)
        offer = offer_for(found[0]) if found is not None else None
    except Exception:  # the alert matters more than its links: it goes without them
        log.exception("email: the decisions of an alert could not be read")
        return []
    if found is None or offer is None or not offer.choices:
        return []
    effect, item_id = found
    hours = max(1, settings.LEDGER_EMAIL_LINK_MAX_AGE // 3600)
    lines = [f"Decide (sign in first; each link works once, for {hours} h):"]
    for choice in offer.choices:
        said = f"{choice.label} (suggested)" if choice.suggested else choice.label
        lines += [
            f"  {said}: {url_for(token_for(effect.pk, choice.action, item_id))}",
            f"    {choice.consequence}",
        ]
    return [*lines, ""]


def opened(session: Any, effect_id: Any, action: str) -> None:
    """Note that this person opened `action` on the effect from an email link."""
    notes = session.get(OPENED) or {}
    session[OPENED] = {**notes, str(effect_id): action}


def channel_of(session: Any, effect_id: Any, action: str) -> str:
    """ "email" when this decision's form was opened from an email link in this session, else
    "page": the channel the effect page's decision records."""
    notes = session.get(OPENED) or {}
    return "email" if notes.get(str(effect_id)) == action else "page"


def decided(session: Any, effect_id: Any) -> None:
    """Forget the note once a decision on the effect is recorded."""
    notes = session.get(OPENED) or {}
    if str(effect_id) in notes:
        session[OPENED] = {k: v for k, v in notes.items() if k != str(effect_id)}
