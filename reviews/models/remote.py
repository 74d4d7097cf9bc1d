"""Deciding away from the pages (`reviews.remote`): a Slack user linked to an account of the
ledger (`SlackIdentity`), and the signed links followed once already (`UsedLink`)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

__all__ = ["SlackIdentity", "UsedLink"]


class SlackIdentity(models.Model):
    """A Slack user, by workspace and user id as Slack's signed requests name them, and the
    account that decides when they press a button. Made by the person (following the link
    Slack showed only them, then signing in) or by an admin (`manage.py linkslack`); never
    from a name or an email Slack sends."""

    team_id = models.CharField(max_length=32)  # the workspace: "T0123ABCD"
    slack_user = models.CharField(max_length=32)  # the user: "U0123ABCD" (or "W…")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identities"
    )
    # "self" (the person, from the pages) or "admin:<username>" (the command).
    linked_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name_plural = "Slack identities"
        constraints = [
            models.UniqueConstraint(
                fields=["team_id", "slack_user"], name="slackidentity_team_user_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.slack_user} in {self.team_id} → {self.user_id}"


class UsedLink(models.Model):
    """A signed link's nonce, written when the link is followed: a link is used once. Its
    signature and age are the link's own (Django's signing); this row is its single use."""

    nonce = models.CharField(max_length=64, unique=True)
    # What the link was for: "decide" (an alert email's) or "slack" (linking a Slack user).
    purpose = models.CharField(max_length=16)
    used_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    used_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.purpose} link used by {self.used_by_id}"
