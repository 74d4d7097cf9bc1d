"""Notes on review items: what operators tell each other about an effect while it waits for a
person, and the evidence of decisions that lost a race (`reviews.queue.notes`)."""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models.functions import Now

__all__ = ["NoteKind", "ReviewNote"]


class NoteKind(models.TextChoices):
    NOTE = "note", "note"
    # An operator's decision that someone else's beat: kept so their evidence is not lost.
    LOST_DECISION = "lost_decision", "lost decision"


class ReviewNote(models.Model):
    """One note on one review item. Append-only, like the event log: an auditor reads what
    operators wrote when they wrote it, so a trigger refuses edits and deletions."""

    item = models.ForeignKey("ledger.ReviewItem", on_delete=models.PROTECT, related_name="notes")
    # A copy of the item's effect (which never changes): the effect page and its live check
    # read an effect's notes through reviewnote_effect_idx without joining the items.
    effect = models.ForeignKey(
        "ledger.Effect", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=20, choices=NoteKind.choices, default=NoteKind.NOTE)
    # Redacted before it is stored (reviews.queue.notes.add_note).
    text = models.TextField()
    # A lost decision's ask: action, evidence, provider_ref and who won.
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # An effect's notes in order, and their count (the effect page, its live check).
            models.Index(fields=["effect", "id"], name="reviewnote_effect_idx"),
        ]
        triggers = [
            pgtrigger.Protect(
                name="reviewnote_append_only", operation=pgtrigger.Update | pgtrigger.Delete
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on item {self.item_id} by {self.author_id}"
