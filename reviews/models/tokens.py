"""Operators' personal API tokens (`reviews.operatorapi`): made by a person on the API tokens
page, scoped, expiring, revocable, kept only as a digest; and the record of every use."""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

__all__ = ["OperatorToken", "OperatorTokenUse", "TokenScope"]


class TokenScope(models.TextChoices):
    # The review queue and one item with the decisions it offers.
    READ = "read", "read"
    # Taking decisions (`reviews.decisions.decide`, channel "api").
    DECIDE = "decide", "decide"


class OperatorToken(models.Model):
    """One personal token: `elop_<prefix>_<secret>`, shown once when made, stored as its public
    prefix and the SHA-256 digest of the whole token. It acts as its person, never as more:
    their role and teams are read again on every use."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="operator_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=64)
    scopes = ArrayField(models.CharField(max_length=10, choices=TokenScope.choices))
    # Narrower than the person's own teams when not empty; empty: the person's teams, whatever
    # they are at the time of use.
    teams = models.ManyToManyField("ledger.Team", blank=True, related_name="+")
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    # Written by every use (`reviews.operatorapi.tokens.authenticate`).
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(scopes__len__gt=0) & Q(scopes__contained_by=TokenScope.values),
                name="optoken_scopes_known",
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=F("created_at")), name="optoken_expires_after"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (elop_{self.prefix}) of {self.user_id}"

    @property
    def shown(self) -> str:
        """The token's public part, as its page, its uses and its decisions name it."""
        return f"elop_{self.prefix}"


class OperatorTokenUse(models.Model):
    """One use of a token that was presented whole (prefix and secret): what was asked and how
    the door answered (`ok`, or why it refused). Append-only: a trigger refuses edits and
    deletions, as for the event log."""

    token = models.ForeignKey(OperatorToken, on_delete=models.PROTECT, related_name="uses")
    at = models.DateTimeField(db_default=Now())
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=300)
    outcome = models.CharField(max_length=40)

    class Meta:
        indexes = [models.Index(fields=["token", "id"], name="optokenuse_token_idx")]
        triggers = [
            pgtrigger.Protect(
                name="optokenuse_append_only", operation=pgtrigger.Update | pgtrigger.Delete
            ),
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} with token {self.token_id}: {self.outcome}"
