"""Who pressed: a Slack user (the workspace and user id of Slack's signed request) as an account
of the ledger (ADR 0020).

- An explicit link first (`SlackIdentity`): made by the person, through the signed link a
  press from an unlinked Slack user is answered with (`link_url`, visible to that Slack user
  alone; confirmed in the pages after signing in, `reviews.remote.slack.linking`), or by an
  admin on the server (`manage.py linkslack`).
- Else, only in a workspace listed in `LEDGER_SLACK_EMAIL_TRUSTED_TEAMS`: the email Slack holds
  for the user (`users.info`) when it is the email of exactly one active SSO account whose
  identity provider said, at its last sign-in, that the address is verified. Never a local
  account's address, never a name.
- Else nobody: the presser is told how to link their account.
"""

from __future__ import annotations

import logging
import secrets

from django.conf import settings
from django.contrib.auth.models import User
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse

from reviews.models import SlackIdentity
from reviews.remote.slack.webapi import SlackCallFailed, profile_email

log = logging.getLogger("reviews.remote.slack")

# The salt of the links that let a Slack user link their account (Django's signing).
LINK_SALT = "reviews.remote.slack.link"


def who_pressed(team_id: str, slack_user: str) -> User | None:
    """The active account the Slack user decides as, or None."""
    linked = (
        SlackIdentity.objects.select_related("user")
        .filter(team_id=team_id, slack_user=slack_user, user__is_active=True)
        .first()
    )
    if linked is not None:
        return linked.user
    if team_id not in settings.LEDGER_SLACK_EMAIL_TRUSTED_TEAMS:
        return None
    try:
        email = profile_email(team_id, slack_user)
    except SlackCallFailed as exc:
        log.warning("slack: %s in %s: no email to map by: %s", slack_user, team_id, exc)
        return None
    return by_verified_email(email) if email else None


def by_verified_email(email: str) -> User | None:
    """The one active SSO account whose provider verified `email`; None for none or several."""
    found = list(
        User.objects.filter(
            is_active=True, email__iexact=email, sso_identity__email_verified=True
        ).order_by("pk")[:2]
    )
    return found[0] if len(found) == 1 else None


def link_url(team_id: str, slack_user: str) -> str:
    """A signed, single-use address at which the person signs in and links this Slack user to
    their account; valid for `LEDGER_SLACK_LINK_MAX_AGE`."""
    token = signing.dumps(
        {"t": team_id, "u": slack_user, "n": secrets.token_urlsafe(16)}, salt=LINK_SALT
    )
    path = reverse("slack-link", kwargs={"token": token})
    return settings.LEDGER_ALERT_LINK_BASE.rstrip("/") + path


class AlreadyLinked(Exception):
    """The Slack user is linked to another account."""


def link(team_id: str, slack_user: str, user: User, *, by: str) -> bool:
    """Link the Slack user to `user`; False when it was linked to them already,
    `AlreadyLinked` when it is another account's (an admin unlinks it first)."""
    try:
        with transaction.atomic():
            SlackIdentity.objects.create(
                team_id=team_id, slack_user=slack_user, user=user, linked_by=by[:200]
            )
    except IntegrityError:
        owner = (
            SlackIdentity.objects.filter(team_id=team_id, slack_user=slack_user)
            .values_list("user_id", flat=True)
            .first()
        )
        if owner == user.pk:
            return False
        raise AlreadyLinked(f"{slack_user} in {team_id} is linked to another account.") from None
    return True


def unlink(team_id: str, slack_user: str) -> int:
    """End the Slack user's link; how many links ended (0 or 1)."""
    deleted, _ = SlackIdentity.objects.filter(team_id=team_id, slack_user=slack_user).delete()
    return deleted


def links_of(user: User) -> list[SlackIdentity]:
    return list(SlackIdentity.objects.filter(user=user).order_by("team_id", "slack_user"))
