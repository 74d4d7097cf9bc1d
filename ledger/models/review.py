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
    POSSIBLE_DUPLICATE = "possible_duplicate", "Possible duplicate"
    MISMATCH = "provider_mismatch", "Provider record differs from the request"
    NOT_FOUND_UNPROVEN = "not_found_unproven", "Not found, but the provider ignores keys"
    COMPENSATION_FAILED = "compensation_failed", "Compensation failed"
    COMPENSATION_UNKNOWN = "compensation_unknown", "Compensation outcome unknown"
    MANUAL_EXECUTION = "manual_execution", "To be carried out by hand"
    APPROVAL_REQUIRED = "approval_required", "Above the approval threshold (four-eyes)"


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
