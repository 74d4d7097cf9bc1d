"""The review queue: effects that need a person, and why."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class Reason(models.TextChoices):
    """Why an effect needs a person: every review item names one of these."""

    NO_LOOKUP = "no_lookup", "No lookup possible"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted", "Attempts exhausted"
    INCONCLUSIVE = "reconciliation_inconclusive", "Reconciliation inconclusive"
    STALE = "unresolved_past_window", "Unresolved past the window"
    # The provider may hold the effect more than once: two provider references for it (a late
    # outcome or webhook, a lookup), or two or more charge lines on its statements. Until
    # migration 0017 a late outcome opened `possible_duplicate`; those items were renamed.
    DUPLICATE = "duplicate", "Duplicate at the provider"
    MISMATCH = "provider_mismatch", "Provider record differs from the request"
    NOT_FOUND_UNPROVEN = "not_found_unproven", "Not found, but the provider ignores keys"
    COMPENSATION_FAILED = "compensation_failed", "Compensation failed"
    COMPENSATION_UNKNOWN = "compensation_unknown", "Compensation outcome unknown"
    MANUAL_EXECUTION = "manual_execution", "To be carried out by hand"
    APPROVAL_REQUIRED = "approval_required", "Above the approval threshold (four-eyes)"
    # A statement line's amount or currency differs from the request.
    AMOUNT_MISMATCH = "amount_mismatch", "Statement amount differs from the request"
    # A statement line or a tail check contradicts a terminal status or an operator's decision.
    STATEMENT_CONTRADICTS = "statement_contradicts_record", "The provider's record contradicts ours"
    # A revised statement no longer lists a line an earlier import applied.
    STATEMENT_LINE_REMOVED = "statement_line_removed", "Line removed by a statement revision"
    # Restore mode (`ledger.restore`): the effect may have moved in the window the database lost.
    RESTORED_GAP = "restored_gap", "May have moved in a lost window (restore)"
    # Two effects of one run and tool with the same request, each sent under its own key
    # (`ledger.containment.repeated`): the provider may have done it twice.
    REPEATED_REQUEST = "repeated_request", "Same request sent twice in one run"


class Severity(models.IntegerChoices):
    """How urgent an item is; an item opened again for a graver reason is raised to it."""

    LOW = 1, "low"
    NORMAL = 2, "normal"
    HIGH = 3, "high"


# The severity an item opens with, by reason (NORMAL where not listed).
SEVERITY = {
    Reason.DUPLICATE: Severity.HIGH,
    Reason.STATEMENT_CONTRADICTS: Severity.HIGH,
    Reason.MISMATCH: Severity.HIGH,
    Reason.AMOUNT_MISMATCH: Severity.HIGH,
    Reason.COMPENSATION_FAILED: Severity.HIGH,
    Reason.RESTORED_GAP: Severity.HIGH,
    Reason.REPEATED_REQUEST: Severity.HIGH,
}
# What a machine closes when it settles the effect itself (a lookup, a webhook, a statement):
# items that asked a person what happened. Not those that ask for a judgement the settling
# does not make (a duplicate, a mismatch, an approval, a failed compensation).
MACHINE_CLOSES = frozenset(
    {
        Reason.NO_LOOKUP,
        Reason.ATTEMPTS_EXHAUSTED,
        Reason.INCONCLUSIVE,
        Reason.STALE,
        Reason.NOT_FOUND_UNPROVEN,
        Reason.COMPENSATION_UNKNOWN,
        Reason.RESTORED_GAP,
    }
)


# The fraction of an item's time (opened → due) after which it is "due soon": the
# `review_due_soon` alert (`reviews.alerts.due`) and the gauge of /metrics count from it.
DUE_SOON = 0.75


def _open_items(name: str, *fields: str) -> models.Index:
    """An index over open review items only (the queue never reads resolved ones by it)."""
    return models.Index(fields=list(fields), name=name, condition=Q(resolved_at__isnull=True))


class ReviewItem(models.Model):
    """An effect that needs a person. At most one open item per effect."""

    effect = models.ForeignKey("ledger.Effect", on_delete=models.PROTECT, related_name="reviews")
    reason = models.CharField(max_length=64, choices=Reason.choices)
    severity = models.PositiveSmallIntegerField(
        choices=Severity.choices, default=Severity.NORMAL, db_default=Severity.NORMAL
    )
    opened_at = models.DateTimeField(db_default=Now())
    due_at = models.DateTimeField()
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    # Since when the assignee holds it (they held it, or were assigned it): the effect page shows
    # the hold, "olga is working on this since 10:02". NULL while nobody holds it. (Named
    # `claimed_at` until migration 0037.)
    held_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    resolution = models.CharField(max_length=2000, blank=True)
    # The decision effect that resolved it (ledger.effects.decision_records).
    decision = models.ForeignKey(
        "ledger.Effect", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Copies of the effect's tool, agent, run and creation time, written by the statement that
    # opens the item (ledger.rules.reviewqueue): none of them ever changes on an effect, and
    # with them the queue filters, sorts and pages on this table alone, through the partial indexes
    # below, instead of joining a million effects first. NULL only on an item opened by
    # something other than that statement (migration 0016 filled in those that existed before
    # it). The effect's status is not copied: it changes with every transition.
    tool = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    # Indexed through review_open_agent_idx; an agent is never deleted while it has effects.
    agent = models.ForeignKey(
        "ledger.Agent",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    run_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    effect_created_at = models.DateTimeField(null=True, blank=True)

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
        # Each index serves one way of narrowing or ordering the review queue
        # (reviews.queue.pages.open_page) over open items only: the queue selects a page's ids from
        # one of them, then fetches those rows with their effects.
        indexes = [
            # The review queue page: open items, oldest first (also the summary's age buckets).
            _open_items("review_open_idx", "opened_at"),
            # The review queue sorted by due time.
            _open_items("review_open_due_idx", "due_at"),
            # The review queue filtered by assignee ("mine").
            _open_items("review_open_assignee_idx", "assignee", "opened_at"),
            # The review queue filtered by tool, by reason, by agent (and mode), by run.
            _open_items("review_open_tool_idx", "tool", "opened_at"),
            _open_items("review_open_reason_idx", "reason", "opened_at"),
            _open_items("review_open_agent_idx", "agent", "opened_at"),
            _open_items("review_open_run_idx", "run_id", "opened_at"),
            # The review queue sorted by the effects' age.
            _open_items("review_open_effect_age_idx", "effect_created_at"),
        ]

    def __str__(self) -> str:
        return f"{self.effect_id}: {self.reason}"
