"""The ledger proper: runs, effects, their dependencies and their append-only events."""

from __future__ import annotations

import uuid

import pgtrigger
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.jsonenc import ExactJSONDecoder, ExactJSONEncoder
from ledger.models.config import Agent
from ledger.models.states import INCOMPLETE, TERMINAL, TRANSITIONS, Kind, Status

_incomplete = Q(status__in=sorted(INCOMPLETE))


class Run(models.Model):
    """One agent's run: hands out `seq`, the order of effects within the run."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE)
    run_id = models.CharField(max_length=200)
    last_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # The seq upsert in ledger.effects.intents (INSERT … ON CONFLICT) targets this index.
            models.UniqueConstraint(fields=["agent", "run_id"], name="run_agent_run_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.agent}/{self.run_id}"


class RequestedBy(models.TextChoices):
    """Who asked for an effect: the agent that owns it, or an operator's decision."""

    AGENT = "agent"
    OPERATOR = "operator"


class Effect(models.Model):
    """One external side effect, recorded before it is dispatched.

    `status` is written only by `ledger.effects.transitions`; the FSM trigger backs that up.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Indexed through effect_agent_key_uniq and the other (agent, …) indexes.
    agent = models.ForeignKey(
        Agent, on_delete=models.PROTECT, related_name="effects", db_index=False
    )
    effect_key = models.CharField(max_length=400)
    run_id = models.CharField(max_length=200)
    step_id = models.CharField(max_length=200)
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ACTION)
    tool = models.CharField(max_length=100)
    target = models.CharField(max_length=500)
    request = models.JSONField(encoder=ExactJSONEncoder, decoder=ExactJSONDecoder)
    request_hash = models.CharField(max_length=80)
    idempotency_key = models.CharField(max_length=64)
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.PLANNED)
    attempt = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField()
    lease_owner = models.CharField(max_length=200, blank=True)
    # NULL while no lease is held: "no token" must never equal any token a client sends.
    lease_token = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    claim_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    lease_seconds = models.PositiveIntegerField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    next_check_at = models.DateTimeField(null=True, blank=True)
    # Leases that ran out before their owner reported (`ledger/sql/lost_leases.sql`): the first
    # five give their attempt back, a crash not being a try.
    lost_leases = models.IntegerField(db_default=0)
    # Inconclusive reconciliation attempts so far: drives the backoff, then review.
    checks = models.PositiveIntegerField(default=0)
    # When the effect last left `dispatching`: a provider's "not found" proves non-receipt only
    # once the tool's settle_after has passed since then (a slow request may still land).
    left_dispatch_at = models.DateTimeField(null=True, blank=True)
    # awaiting_confirmation becomes unknown when nothing confirmed it by then.
    confirm_deadline = models.DateTimeField(null=True, blank=True)
    provider_ref = models.CharField(max_length=500, blank=True)
    response = models.JSONField(
        null=True, blank=True, encoder=ExactJSONEncoder, decoder=ExactJSONDecoder
    )
    error = models.JSONField(
        null=True, blank=True, encoder=ExactJSONEncoder, decoder=ExactJSONDecoder
    )
    # Digest of the last accepted outcome (token, status, provider_ref, response), so that a
    # repeated outcome is recognised after the lease has been cleared.
    outcome_digest = models.CharField(max_length=80, blank=True)
    outcome_token = models.CharField(max_length=64, blank=True)
    # Indexed through effect_parent_idx (partial: most effects have no parent).
    parent = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="children",
        db_index=False,
    )
    provenance = models.JSONField(
        default=dict, blank=True, encoder=ExactJSONEncoder, decoder=ExactJSONDecoder
    )
    depends_on = models.ManyToManyField(
        "self",
        through="EffectDependency",
        through_fields=("downstream", "upstream"),
        symmetrical=False,
        related_name="dependents",
        blank=True,
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    resolved_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    # Where the agent asked to be told of each status change (an allow-listed host; "" for
    # none). The trigger of migration 0013 enqueues the signed callback in the outbox.
    callback_url = models.CharField(max_length=2000, blank=True, db_default="")
    # The request's amount in integer minor units and its currency, read at the tool's
    # amount_path / currency_path (and amount_unit) by a trigger as the effect is written
    # (migration 0017): they stay when retention redacts the request, so that later
    # statements still match. NULL / "": the tool declares no amount, or it was unreadable.
    amount_minor = models.BigIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True, db_default="")
    # An effect retried on a proof of absence gets one more lookup this long after it next
    # resolves (`ledger.rules.lookup_absence`): a first request that landed late shows up as a
    # duplicate.
    tail_check_at = models.DateTimeField(null=True, blank=True)
    # Set by an admin: retention keeps this effect's payloads (`ledger.audit.retention`).
    legal_hold = models.BooleanField(default=False, db_default=False)
    # Who asked for it. Only the operator's compensations are exempt from agent, run and `all`
    # halts, and agents may not cancel, claim or report on what an operator decided
    # (`ledger.effects.compensation`, `ledger/sql/halts.sql`, `ledger/sql/compensations.sql`).
    requested_by = models.CharField(
        max_length=8,
        choices=RequestedBy.choices,
        default=RequestedBy.AGENT,
        db_default=RequestedBy.AGENT,
    )

    class Meta:
        constraints = [
            # Intent repeats are found through this index: (agent, effect_key) is the identity of
            # a logical operation.
            models.UniqueConstraint(fields=["agent", "effect_key"], name="effect_agent_key_uniq"),
            models.CheckConstraint(
                condition=Q(attempt__lte=models.F("max_attempts")), name="effect_attempt_cap"
            ),
            models.CheckConstraint(
                condition=Q(lease_seconds__isnull=True)
                | Q(lease_seconds__gte=1, lease_seconds__lte=3600),
                name="effect_lease_seconds_range",
            ),
        ]
        indexes = [
            # GET /runs/{run_id}/journal: an agent's effects of one run in seq order.
            models.Index(fields=["agent", "run_id", "seq"], name="effect_journal_idx"),
            # GET /effects: keyset pagination over an agent's effects by (created_at, id).
            models.Index(fields=["agent", "created_at", "id"], name="effect_list_idx"),
            # Webhooks and provider lookups match effects by idempotency key.
            models.Index(fields=["idempotency_key"], name="effect_idem_key_idx"),
            # Compensations and decisions of an effect (detail pages, journal).
            models.Index(
                fields=["parent"], name="effect_parent_idx", condition=Q(parent__isnull=False)
            ),
            # POST /recovery: an agent's incomplete effects, optionally by owner.
            models.Index(
                fields=["agent", "lease_owner"], name="effect_incomplete_idx", condition=_incomplete
            ),
            # The reconciliation worker's queue of record: due checks on unresolved effects.
            models.Index(
                fields=["next_check_at"],
                name="effect_due_check_idx",
                condition=_incomplete & Q(next_check_at__isnull=False),
            ),
            # The lease sweeper: dispatching effects whose lease has run out.
            models.Index(
                fields=["lease_expires_at"],
                name="effect_lease_idx",
                condition=Q(status=Status.DISPATCHING),
            ),
            # reconcilers.execution.redrive_executions: compensations waiting to be sent.
            models.Index(
                fields=["created_at"],
                name="effect_planned_comp_idx",
                condition=Q(kind=Kind.COMPENSATION, status=Status.PLANNED),
            ),
            # The tail checks (`ledger.rules.lookup_absence`): effects due for one more lookup.
            models.Index(
                fields=["tail_check_at"],
                name="effect_tail_check_idx",
                condition=Q(tail_check_at__isnull=False),
            ),
            # Retention (ledger.audit.retention): terminal effects not yet redacted, the longest
            # resolved first (built concurrently, 0021).
            models.Index(
                fields=["resolved_at", "id"],
                name="effect_retention_idx",
                condition=Q(status__in=sorted(TERMINAL)) & ~Q(target="redacted"),
            ),
            # The escalation sweep: unresolved effects by age.
            models.Index(
                fields=["created_at"], name="effect_unresolved_age_idx", condition=_incomplete
            ),
            # The review queue's exact-match search (reviews.queue.pages.search_effects),
            # besides the primary key and effect_idem_key_idx: by provider reference (partial:
            # effects the provider has not named have none), by target, by run of any agent
            # (built concurrently, 0024).
            models.Index(
                fields=["provider_ref"],
                name="effect_provider_ref_idx",
                condition=~Q(provider_ref=""),
            ),
            models.Index(fields=["target"], name="effect_target_idx"),
            models.Index(fields=["run_id"], name="effect_run_idx"),
        ]
        triggers = [
            pgtrigger.FSM(
                name="effect_status_fsm",
                field="status",
                transitions=sorted((str(a), str(b)) for a, b in TRANSITIONS),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.effect_key} [{self.status}]"


class EffectDependency(models.Model):
    """`downstream` may not be claimed until `upstream` is confirmed."""

    # Both indexed through the constraints and indexes below.
    downstream = models.ForeignKey(
        Effect, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    upstream = models.ForeignKey(Effect, on_delete=models.PROTECT, related_name="+", db_index=False)

    class Meta:
        constraints = [
            # Claim-time interlock check reads an effect's upstreams through this index.
            models.UniqueConstraint(fields=["downstream", "upstream"], name="dependency_uniq"),
        ]
        indexes = [
            # The upstream_failed cascade walks from an upstream to its dependents.
            models.Index(fields=["upstream"], name="dependency_upstream_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.downstream_id} waits for {self.upstream_id}"


class EventKind(models.TextChoices):
    INTENT = "intent"
    TRANSITION = "transition"
    LATE_OUTCOME = "late_outcome"
    # A provider lookup and its answer, whatever it led to.
    RECONCILIATION = "reconciliation"
    # An operator's decision, on the decision effect itself.
    DECISION = "decision"
    # A statement line matched to the effect, and what it led to (`ledger.statements`).
    STATEMENT = "statement"
    # Retention redacted the effect's payloads (`ledger.audit.retention`): the one event after which
    # the append-only trigger lets the effect's earlier events' data become {"redacted": true}.
    RETENTION_PURGE = "retention_purge"
    # A machine settled the effect and closed its open review item
    # (`ledger.rules.reviewqueue`).
    REVIEW_CLOSED = "review_closed"
    # The effect repeats an earlier one's request in its run under another key
    # (`ledger.containment.repeated`): a possible duplicate, raised once.
    REPEATED = "repeated"
    # A live lease ended before its time because its holder is gone: the process that claimed
    # it died and its successor said so (`ledger.effects.transitions.end_lease`).
    LEASE_ENDED = "lease_ended"


class EffectEvent(models.Model):
    """One row per state change of an effect: the history. Append-only in PostgreSQL."""

    # Indexed through event_timeline_idx (effect, id).
    effect = models.ForeignKey(
        Effect, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    kind = models.CharField(max_length=16, choices=EventKind.choices)
    actor = models.CharField(max_length=200)
    from_status = models.CharField(max_length=32, blank=True)
    to_status = models.CharField(max_length=32, blank=True)
    reason = models.CharField(max_length=2000, blank=True)
    # What changed (redacted), and a SHA-256 digest of its canonical form.
    data = models.JSONField(default=dict, encoder=ExactJSONEncoder, decoder=ExactJSONDecoder)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # The effect timeline: an effect's events in order.
            models.Index(fields=["effect", "id"], name="event_timeline_idx"),
            # The overview's recent recovery activity: lookups and the machines' own moves.
            models.Index(
                fields=["id"],
                name="event_recovery_idx",
                condition=Q(kind="reconciliation") | Q(actor__startswith="system:"),
            ),
            # Auditor exports: a date range of events in their export order (created_at, id),
            # read in index order instead of sorting the table (built concurrently, 0015).
            models.Index(fields=["created_at", "id"], name="event_created_idx"),
        ]
        triggers = [
            # Append-only, but for one change: retention (`ledger.audit.retention`) may replace an
            # event's data with {"redacted": true}, every other column (the digest too) as it
            # was, once a retention_purge event of the same effect was appended after it. The
            # seals cover the digest, not the data, so `verifyledger` still holds; it accepts
            # the marker on this same condition (`ledger.audit.seal`). Migration 0020 installs it.
            pgtrigger.Trigger(
                name="event_append_only",
                when=pgtrigger.Before,
                operation=pgtrigger.Update | pgtrigger.Delete,
                func=pgtrigger.Func(
                    "IF TG_OP = 'UPDATE' AND NEW.data = jsonb_build_object('redacted', true) "
                    "AND to_jsonb(NEW) - 'data' = to_jsonb(OLD) - 'data' "
                    f"AND OLD.kind <> '{EventKind.RETENTION_PURGE.value}' "
                    "AND EXISTS (SELECT 1 FROM {meta.db_table} p "
                    "WHERE p.effect_id = OLD.effect_id "
                    f"AND p.kind = '{EventKind.RETENTION_PURGE.value}' AND p.id > OLD.id) "
                    "THEN RETURN NEW; END IF; "
                    "RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', "
                    "TG_TABLE_NAME;"
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.effect_id} {self.from_status}→{self.to_status}"


class WebhookDelivery(models.Model):
    """Signatures already accepted, so a replayed callback is refused."""

    provider = models.CharField(max_length=100)
    signature = models.CharField(max_length=128)
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Replay check: INSERT … ON CONFLICT against this index.
            models.UniqueConstraint(fields=["provider", "signature"], name="webhook_replay_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.provider} at {self.received_at}"
