"""Containment: alerts waiting to go out, halts that stop claims, limit counters, and retries
waiting for a second operator."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.jsonenc import ExactJSONDecoder, ExactJSONEncoder


class AlertKind(models.TextChoices):
    REVIEW_DUE_SOON = "review_due_soon", "Review item 75% through its time"
    REVIEW_OVERDUE = "review_overdue", "Review item overdue"
    HALT = "halt", "Halt"
    LIMIT_EXCEEDED = "limit_exceeded", "Limit exceeded"
    # A statement line no effect intended (ledger.statements): a possible unauthorized charge.
    INCIDENT_OPENED = "incident_opened", "Incident opened"
    # An agent's callback (ledger.api.notifications): posted to the effect's callback_url only.
    CALLBACK = "callback", "Effect status changed (agent callback)"
    # The ledger entered restore mode (`ledger.restore`): its database went back in time.
    RESTORE = "restore", "Restore mode entered"
    # Two effects of one run and tool sent with the same request (`ledger.containment.repeated`).
    REPEATED_REQUEST = "repeated_request", "Same request sent twice in one run"


class Alert(models.Model):
    """The alert outbox: one row per thing to tell people, written in the transaction (or by
    the sweep) that saw it and sent later by one sender (`ledger.rules.outbox`,
    `reviews.alerts`). Its id is the email's Message-ID and the webhook's Idempotency-Key."""

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
            # The sender's queue (ledger.rules.outbox.lease): unsent alerts by when they may
            # go.
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
    """A halt: no claim of an effect it covers commits while it is active, from `since` until
    it is resumed (`ledger.containment.halts`; the claim trigger, `ledger/sql/halts.sql`,
    enforces it in PostgreSQL, for old processes too)."""

    scope = models.CharField(max_length=8, choices=HaltScope.choices)
    # A tool's or agent's name, or a run_id (run ids are not per agent here); "" for scope `all`.
    value = models.CharField(max_length=200, blank=True)
    # A run halt's teams (ids, sorted): it covers that run's agents of these teams and of no
    # team. NULL: every agent (an admin's, the shell's, the ledger's own). Only run halts have
    # them: a tool's or agent's halt already belongs to one team (ADR 0014).
    teams = ArrayField(models.BigIntegerField(), null=True, blank=True)
    reason = models.CharField(max_length=2000)
    halted_by = models.CharField(max_length=200)  # operator username, or "shell:<user>"
    since = models.DateTimeField(db_default=Now())
    # Compensations run through agent, run and `all` halts unless this says otherwise.
    include_compensations = models.BooleanField(default=False)
    # Set when it is resumed, and by whom; NULL while it is active. (Named `lifted_at` and
    # `lifted_by` until migration 0037.)
    resumed_at = models.DateTimeField(null=True, blank=True)
    resumed_by = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            # One active halt per (scope, value, teams): halt() and resume() find it through
            # these, and the claim trigger's ledger_covering_halt() reads the active halts
            # through them. An admin's run halt and a team's of the same run are two.
            models.UniqueConstraint(
                fields=["scope", "value"],
                condition=Q(resumed_at__isnull=True, teams__isnull=True),
                name="halt_active_uniq",
            ),
            models.UniqueConstraint(
                fields=["scope", "value", "teams"],
                condition=Q(resumed_at__isnull=True, teams__isnull=False),
                name="halt_active_teams_uniq",
            ),
            models.CheckConstraint(
                condition=Q(teams__isnull=True) | Q(scope="run"),
                name="halt_teams_run_only",
            ),
        ]

    def __str__(self) -> str:
        return f"halt {self.scope} {self.value}".rstrip()


class LimitCounter(models.Model):
    """Claims counted against a per-minute limit: one row per (scope, period), where scope is
    "tool:<name>" or "agent:<id>" and period the calendar minute. `ledger.rules.limits` raises
    `used` with a conditional UPDATE in the claim's own transaction, so only claims under the
    same limit wait for each other. Also the row whose lock orders amount charges per
    (scope, currency): period "24h" (see `ledger.rules.limits`)."""

    scope = models.CharField(max_length=120)
    period = models.CharField(max_length=32)
    currency = models.CharField(max_length=3, blank=True, default="")
    used = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # The INSERT … ON CONFLICT DO NOTHING and the conditional UPDATE find the row by it.
            models.UniqueConstraint(
                fields=["scope", "period", "currency"], name="limitcounter_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.period} {self.currency} {self.used}".rstrip()


class AmountCharge(models.Model):
    """An effect's amount, counted once against one amount limit until it is released on proof
    of non-receipt (the row is deleted then). `ledger.rules.limits` sums the rows of the last
    24 h."""

    # No index of its own: the unique (effect, scope) below leads with it.
    effect = models.ForeignKey(
        "ledger.Effect", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    scope = models.CharField(max_length=120)
    currency = models.CharField(max_length=3)
    # Integer minor units of the currency (ISO 4217 exponent): exact, never a float.
    amount_minor = models.BigIntegerField()
    charged_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Once per effect and limit: a re-claim of the effect meets this and counts nothing.
            models.UniqueConstraint(fields=["effect", "scope"], name="amountcharge_once_uniq"),
        ]
        indexes = [
            # The rolling sum in ledger.rules.limits: one limit's charges of the last 24 h.
            models.Index(
                fields=["scope", "currency", "charged_at"], name="amountcharge_window_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.amount_minor} {self.currency}"


class RetryProposal(models.Model):
    """An operator's retry of an effect whose only ground is their own word that the provider
    never received it (`ledger.effects.recovery.VERIFIED_ABSENT`): a second operator must confirm it
    before the effect leaves `unknown`, or reject it (`reviews.decisions`)."""

    effect = models.ForeignKey("ledger.Effect", on_delete=models.PROTECT, related_name="+")
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    # The decision effect that recorded the proposal (its reason and evidence).
    proposal = models.ForeignKey(
        "ledger.Effect", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    evidence = models.CharField(max_length=2000)
    # The effect's version when proposed: if the effect moves meanwhile (reconciliation found
    # it, say), the proposal no longer applies and is never carried out.
    effect_version = models.PositiveIntegerField()
    proposed_at = models.DateTimeField(db_default=Now())
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # "confirmed", "rejected" or "superseded" (the effect moved first) once decided.
    outcome = models.CharField(max_length=16, blank=True)

    class Meta:
        constraints = [
            # One pending proposal per effect; `reviews.decisions` finds it through this index.
            models.UniqueConstraint(
                fields=["effect"],
                condition=Q(decided_at__isnull=True),
                name="retryproposal_one_pending_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"retry of {self.effect_id} proposed by {self.proposed_by_id}"
