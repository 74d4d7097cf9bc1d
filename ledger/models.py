from __future__ import annotations

import uuid

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.jsonenc import ExactJSONDecoder, ExactJSONEncoder
from ledger.states import INCOMPLETE, TRANSITIONS, Kind, Status

_incomplete = Q(status__in=sorted(INCOMPLETE))


class ConfigVersion(models.Model):
    """One row: the version of what every process remembers between requests (tools, API keys,
    agents' `is_active`). Triggers on those tables move it in the changing transaction, so
    raw SQL and other processes move it too; a process drops what it remembered once the
    version it reads differs from the one its copies were read under (`ledger.configversion`).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    version = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="configversion_one_row")]

    def __str__(self) -> str:
        return f"configuration version {self.version}"


# Each bump draws from a sequence: a version never comes back, not even after the row is
# deleted (a test database's flush) and written again, and two statements of one transaction
# move it twice. Readers compare for equality only, so concurrent bumps may commit in any order.
CONFIG_VERSION_SEQUENCE = "ledger_configversion_seq"
_BUMP_CONFIG_VERSION = (
    f"INSERT INTO {ConfigVersion._meta.db_table} (id, version, changed_at) "
    f"VALUES (1, nextval('{CONFIG_VERSION_SEQUENCE}'), now()) "
    "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, changed_at = EXCLUDED.changed_at; "
    "RETURN NULL;"
)


def _bumps_config_version(name: str) -> pgtrigger.Trigger:
    """Every statement that changes the table moves the version, TRUNCATE included."""
    return pgtrigger.Trigger(
        name=name,
        level=pgtrigger.Statement,
        when=pgtrigger.After,
        operation=pgtrigger.Insert | pgtrigger.Update | pgtrigger.Delete | pgtrigger.Truncate,
        func=_BUMP_CONFIG_VERSION,
    )


class Agent(models.Model):
    """A machine client. Effects are recorded under the agent whose key made the call."""

    name = models.CharField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        triggers = [
            # Deactivating an agent refuses its keys everywhere. A new agent has no key yet,
            # and deleting one deletes its keys, which moves the version on their own table.
            pgtrigger.Trigger(
                name="agent_active_bumps_config",
                level=pgtrigger.Row,
                when=pgtrigger.After,
                operation=pgtrigger.UpdateOf("is_active"),
                condition=pgtrigger.AnyChange("is_active"),
                func=_BUMP_CONFIG_VERSION,
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A bearer key: shown once at creation, stored as prefix + SHA-256 digest, revocable."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    # The public part of the key, unique, used to find the row (the unique index serves it).
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        triggers = [_bumps_config_version("apikey_bumps_config")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.agent})"


class Tool(models.Model):
    """What a tool can do when something goes wrong, and its policy.

    Capabilities rather than one class: `read_only`, `honours_key` (with `key_ttl`, how long
    the provider remembers keys) and `has_lookup`. A tool nobody declared is treated as
    `unsafe`: no capability at all.
    """

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)
    read_only = models.BooleanField(default=False)
    honours_key = models.BooleanField(default=False)
    key_ttl = models.DurationField(null=True, blank=True)
    has_lookup = models.BooleanField(default=False)
    confirm_within = models.DurationField(null=True, blank=True)
    settle_after = models.DurationField(null=True, blank=True)
    compensated_by = models.CharField(max_length=100, blank=True)
    reconciler = models.CharField(max_length=100, blank=True)
    reconciler_config = models.JSONField(default=dict, blank=True)
    # The provider (a name in LEDGER_WEBHOOK_SECRETS) whose signed callbacks may settle this
    # tool's effects; blank: no callback can.
    webhook_provider = models.CharField(max_length=100, blank=True)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    escalate_after = models.DurationField()
    backoffice_window = models.DurationField()
    retention = models.DurationField()
    # Field names exempt from the card-number scan (a 13-digit millisecond timestamp).
    card_scan_allow = models.JSONField(default=list, blank=True)
    # Dotted paths into the request/response that are always tokenized ("customer.ssn").
    redact_paths = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        triggers = [_bumps_config_version("tool_bumps_config")]

    def __str__(self) -> str:
        return self.name

    @property
    def classification(self) -> str:
        if self.read_only:
            return "read_only"
        if self.honours_key and self.has_lookup:
            return "idempotent+lookup"
        if self.honours_key:
            return "idempotent"
        if self.has_lookup:
            return "lookup"
        return "unsafe"


class Run(models.Model):
    """One agent's run: hands out `seq`, the order of effects within the run."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE)
    run_id = models.CharField(max_length=200)
    last_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # The seq upsert in ledger.intents (INSERT … ON CONFLICT) targets this index.
            models.UniqueConstraint(fields=["agent", "run_id"], name="run_agent_run_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.agent}/{self.run_id}"


class Effect(models.Model):
    """One external side effect, recorded before it is dispatched.

    `status` is written only by `ledger.transitions`; the FSM trigger backs that up.
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
            # The escalation sweep: unresolved effects by age.
            models.Index(
                fields=["created_at"], name="effect_unresolved_age_idx", condition=_incomplete
            ),
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
        ]
        triggers = [
            pgtrigger.Protect(
                name="event_append_only", operation=pgtrigger.Update | pgtrigger.Delete
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


class EventSeal(models.Model):
    """One link of the tamper-evident chain over the event log: written in order by the sealer
    (`ledger.seal`), never updated. Each hash covers the previous hash and the event's
    canonical content (its payload digest, not the payload: redaction keeps the chain whole).
    """

    seq = models.BigIntegerField(primary_key=True)
    # Unique: an event is sealed once. The sealer's "not sealed yet" probe uses this index.
    event = models.OneToOneField(EffectEvent, on_delete=models.PROTECT, related_name="seal")
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    sealed_at = models.DateTimeField(db_default=Now())

    class Meta:
        triggers = [
            pgtrigger.Protect(
                name="seal_append_only", operation=pgtrigger.Update | pgtrigger.Delete
            ),
        ]

    def __str__(self) -> str:
        return f"seal {self.seq} of event {self.event_id}"


class AuditExport(models.Model):
    """Who exported what: every export is recorded when it starts and when it finishes."""

    user = models.ForeignKey(
        "auth.User", on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    username = models.CharField(max_length=150)
    dataset = models.CharField(max_length=16)  # effects | events | decisions
    format = models.CharField(max_length=8)  # csv | jsonl
    filters = models.JSONField(default=dict)
    started_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    rows = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.username}: {self.dataset}.{self.format} at {self.started_at}"


class Reason(models.TextChoices):
    """Why an effect needs a person: every review item names one of these."""

    NO_LOOKUP = "no_lookup", "No lookup possible"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted", "Attempts exhausted"
    INCONCLUSIVE = "reconciliation_inconclusive", "Reconciliation inconclusive"
    STALE = "unresolved_past_window", "Unresolved past the window"
    POSSIBLE_DUPLICATE = "possible_duplicate", "Possible duplicate"
    MISMATCH = "provider_mismatch", "Provider record differs from the request"
    NOT_FOUND_UNPROVEN = "not_found_unproven", "Not found, but the provider ignores keys"
    COMPENSATION_FAILED = "compensation_failed", "Compensation failed"
    COMPENSATION_UNKNOWN = "compensation_unknown", "Compensation outcome unknown"
    MANUAL_EXECUTION = "manual_execution", "To be carried out by hand"


class ReviewItem(models.Model):
    """An effect that needs a person. At most one open item per effect."""

    effect = models.ForeignKey("ledger.Effect", on_delete=models.PROTECT, related_name="reviews")
    reason = models.CharField(max_length=64, choices=Reason.choices)
    opened_at = models.DateTimeField(db_default=Now())
    due_at = models.DateTimeField()
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    resolution = models.CharField(max_length=2000, blank=True)
    # The decision effect that resolved it (ledger.decisions).
    decision = models.ForeignKey(
        "ledger.Effect", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        # The table keeps the name it had when the model lived in the reviews app.
        db_table = "reviews_reviewitem"
        constraints = [
            # One open item per effect; open_review's INSERT … ON CONFLICT DO NOTHING targets it.
            models.UniqueConstraint(
                fields=["effect"],
                condition=Q(resolved_at__isnull=True),
                name="review_one_open_uniq",
            ),
        ]
        indexes = [
            # The review queue page: open items, oldest first (also the overview's age chart).
            models.Index(
                fields=["opened_at"], name="review_open_idx", condition=Q(resolved_at__isnull=True)
            ),
            # The review queue sorted by due time.
            models.Index(
                fields=["due_at"], name="review_open_due_idx", condition=Q(resolved_at__isnull=True)
            ),
            # The review queue filtered by assignee ("mine").
            models.Index(
                fields=["assignee", "opened_at"],
                name="review_open_assignee_idx",
                condition=Q(resolved_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.effect_id}: {self.reason}"
