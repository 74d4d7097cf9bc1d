"""Containment: alerts waiting to go out, and halts that stop claims."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.jsonenc import ExactJSONDecoder, ExactJSONEncoder


class AlertKind(models.TextChoices):
    REVIEW_DUE_SOON = "review_due_soon", "Review item 75% through its time"
    REVIEW_OVERDUE = "review_overdue", "Review item overdue"
    HALT = "halt", "Halt"
    LIMIT_EXCEEDED = "limit_exceeded", "Limit exceeded"


class Alert(models.Model):
    """The alert outbox: one row per thing to tell people, written in the transaction (or by
    the sweep) that saw it and sent later by one sender (`ledger.outbox`, `reviews.alerts`).
    Its id is the email's Message-ID and the webhook's Idempotency-Key."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=32, choices=AlertKind.choices)
    # What the alert is about, unique per kind: a review item's id, a halt's id, "limit:window".
    key = models.CharField(max_length=300)
    payload = models.JSONField(default=dict, encoder=ExactJSONEncoder, decoder=ExactJSONDecoder)
    created_at = models.DateTimeField(db_default=Now())
    # While unsent: leased to a sender until then, or after a failure not retried before then.
    leased_until = models.DateTimeField(null=True, blank=True)
    # Each lease adds one; the sender's final UPDATE names the count it leased (its fence).
    attempts = models.PositiveIntegerField(default=0)
    # Channels that took it already ("email", "webhook"), so a retry skips them.
    delivered = models.JSONField(default=list, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=2000, blank=True)

    class Meta:
        constraints = [
            # Once per (kind, key): the sweep's and notify()'s INSERT … ON CONFLICT target it.
            models.UniqueConstraint(fields=["kind", "key"], name="alert_once_uniq"),
        ]
        indexes = [
            # The sender's queue (ledger.outbox.lease): unsent alerts by when they may go.
            models.Index(
                fields=["leased_until", "created_at"],
                name="alert_unsent_idx",
                condition=Q(sent_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class HaltScope(models.TextChoices):
    TOOL = "tool"
    AGENT = "agent"
    RUN = "run"
    ALL = "all"


class Halt(models.Model):
    """A kill switch: no claim of an effect it covers commits while it is active (`ledger.halts`;
    the claim trigger of migration 0008 enforces it in PostgreSQL, for old processes too)."""

    scope = models.CharField(max_length=8, choices=HaltScope.choices)
    # A tool's or agent's name, or a run_id (of every agent: run ids are not per agent here);
    # "" for scope `all`.
    value = models.CharField(max_length=200, blank=True)
    reason = models.CharField(max_length=2000)
    halted_by = models.CharField(max_length=200)  # operator username, or "shell:<user>"
    since = models.DateTimeField(db_default=Now())
    # Compensations run through agent, run and `all` halts unless this says otherwise.
    include_compensations = models.BooleanField(default=False)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            # One active halt per (scope, value): halt() and resume() find it through this, and
            # the claim trigger's ledger_covering_halt() reads the active halts through it.
            models.UniqueConstraint(
                fields=["scope", "value"],
                condition=Q(lifted_at__isnull=True),
                name="halt_active_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"halt {self.scope} {self.value}".rstrip()
