"""The provider's own record: imported statements, their lines, and the incidents they open
(`ledger.statements`).

The lines and incidents name effects by id without a foreign-key constraint: adding one would
take a SHARE ROW EXCLUSIVE lock on the effects table while the migration runs
(`tests/test_migration_locks.py`), and effects are never deleted (their events protect them).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.models.review import Severity


class Origin(models.TextChoices):
    COMMAND = "command"  # manage.py importstatement
    UPLOAD = "upload"  # an operator's upload form
    FETCH = "fetch"  # an adapter's fetch_statement, on the daily schedule
    # Restore mode's listing of a lost window (`ledger.restore.gap`): provisional, its lines
    # matched or raised as incidents, never a revision of a real statement.
    SWEEP = "sweep"


class Phase(models.TextChoices):
    """How far applying an import got; `ledger.statements.resume` goes on from there."""

    LINES = "lines"  # matching its lines to effects, in batches by effect id (`cursor`)
    REMOVALS = "removals"  # lines a revision removed: review items, by line id (`cursor`)
    ABSENCE = "absence"  # proofs of absence from final statements, by effect id (`cursor`)
    ORPHANS = "orphans"  # lines no effect intended, once the next period is in
    DONE = "done"


class LineType(models.TextChoices):
    CHARGE = "charge"
    REFUND = "refund"
    CAPTURE = "capture"
    REVERSAL = "reversal"
    FEE = "fee"


class LineStatus(models.TextChoices):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PENDING = "pending"


class StatementImport(models.Model):
    """One imported statement file: the audit record (who, the file's SHA-256, the period) and
    how far applying it got. Staged all-or-nothing: a row exists only for a file whose every
    line was valid and is stored."""

    tool = models.CharField(max_length=100)
    filename = models.CharField(max_length=500)
    sha256 = models.CharField(max_length=64)
    # The half-open period [period_start, period_end) the provider says the file covers.
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    # A provisional statement may still change: it never proves absence.
    provisional = models.BooleanField(default=False)
    origin = models.CharField(max_length=16, choices=Origin.choices)
    imported_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.LINES)
    # The last effect id (lines, absence) or line id (removals) the phase has applied.
    cursor = models.CharField(max_length=64, blank=True, default="")
    # Earlier imports of the tool whose periods overlap this one's: this import revises them.
    revises = models.JSONField(default=list, blank=True)
    # Orphans of this statement have been looked for (the next period's final statement is in).
    orphans_checked = models.BooleanField(default=False)
    # Counts: lines in the file; of them new, changed and unchanged against the lines already
    # imported for the period; earlier lines it removed; its lines that name an effect.
    lines = models.PositiveIntegerField(default=0)
    lines_new = models.PositiveIntegerField(default=0)
    lines_changed = models.PositiveIntegerField(default=0)
    lines_unchanged = models.PositiveIntegerField(default=0)
    lines_removed = models.PositiveIntegerField(default=0)
    lines_matched = models.PositiveIntegerField(default=0)
    # What applying it did: effects confirmed, failed, sent back to planned (absence proven),
    # review items opened or raised, duplicates reported, orphan incidents opened; batches run.
    confirmed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    retried = models.PositiveIntegerField(default=0)
    reviews = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    orphans = models.PositiveIntegerField(default=0)
    batches = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            # A tool's statements by period: overlaps (revisions), the union of final periods
            # (proofs of absence), the next period (orphans), already_imported.
            models.Index(fields=["tool", "period_start"], name="stmimport_tool_period_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.period_start:%Y-%m-%d}…{self.period_end:%Y-%m-%d} #{self.pk}"


class StatementLine(models.Model):
    """One line of an imported statement, in integer minor units. A line is current until a
    later revision of its period removes or changes it (`removed_by`)."""

    statement = models.ForeignKey(StatementImport, on_delete=models.PROTECT, related_name="+")
    line_no = models.PositiveIntegerField()
    provider_ref = models.CharField(max_length=500)
    reference = models.CharField(max_length=500, blank=True)
    type = models.CharField(max_length=16, choices=LineType.choices)
    status = models.CharField(max_length=16, choices=LineStatus.choices)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    occurred_at = models.DateTimeField()
    # The effect the line's reference names (by idempotency key or id), set when staged.
    effect = models.ForeignKey(
        "ledger.Effect",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="statement_lines",
        db_index=False,
    )
    # What applying it did to its effect ("confirmed", "failed", "duplicate", "amount_mismatch",
    # "contradicts", "held", "orphan"); "agrees" when staging saw it only repeat the record;
    # "" when it moved nothing. On a line a revision replaced: "revised" or "removed".
    outcome = models.CharField(max_length=32, blank=True, default="")
    removed_by = models.ForeignKey(
        StatementImport,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )

    class Meta:
        constraints = [
            # A statement's lines in file order (revisions diff and show them by it).
            models.UniqueConstraint(fields=["statement", "line_no"], name="stmline_line_uniq"),
        ]
        indexes = [
            # An effect's current and past lines: matching reads all of them, whatever period.
            models.Index(
                fields=["effect"], name="stmline_effect_idx", condition=Q(effect__isnull=False)
            ),
            # Applying an import: the effects of its lines still to be read (not `agrees`
            # already when staged), in effect id batches.
            models.Index(
                fields=["statement", "effect"],
                name="stmline_apply_idx",
                condition=Q(effect__isnull=False, outcome=""),
            ),
            # Orphan candidates: a statement's current lines that name no effect.
            models.Index(
                fields=["statement", "line_no"],
                name="stmline_unmatched_idx",
                condition=Q(effect__isnull=True, removed_by__isnull=True),
            ),
            # The removals phase: lines a revision took out.
            models.Index(
                fields=["removed_by", "id"],
                name="stmline_removed_idx",
                condition=Q(removed_by__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider_ref} {self.type} {self.status} {self.amount_minor} {self.currency}"


class IncidentKind(models.TextChoices):
    # A statement line no effect intended: a possible unauthorized charge.
    ORPHAN = "orphan", "Statement line no effect intended"


class Incident(models.Model):
    """Something at the provider that the ledger did not ask for. Like a review item it has a
    severity, a due time and a place in the queue; it is closed by an acknowledge decision
    (`ledger.statements.acknowledge_incident`), recorded as a decision effect."""

    kind = models.CharField(max_length=16, choices=IncidentKind.choices)
    tool = models.CharField(max_length=100)
    line = models.OneToOneField(StatementLine, on_delete=models.PROTECT, related_name="incident")
    severity = models.PositiveSmallIntegerField(choices=Severity.choices, default=Severity.HIGH)
    opened_at = models.DateTimeField(db_default=Now())
    due_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    note = models.CharField(max_length=2000, blank=True, default="")
    # The decision effect that acknowledged it (kind decision, under the system agent).
    decision = models.ForeignKey(
        "ledger.Effect",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )

    class Meta:
        indexes = [
            # The incident queue (`ledger.statements.incident_queue`): open ones, gravest first,
            # then by due time.
            models.Index(
                models.F("severity").desc(),
                "due_at",
                name="incident_open_idx",
                condition=Q(acknowledged_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.tool})"
