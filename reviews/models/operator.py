"""Saved queue filters and bulk jobs: an operator's own ways of working through the queue."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

__all__ = ["BulkJob", "BulkJobState", "SavedFilter"]


class SavedFilter(models.Model):
    """A named queue query ("tool=charge_card&reason=duplicate") that one operator keeps.
    Nobody else sees it: every read goes through `owner`."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    name = models.CharField(max_length=100)
    query = models.CharField(max_length=2000)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name"]
        constraints = [
            # The queue lists an operator's filters by name through this index; saving under a
            # name that exists replaces that filter.
            models.UniqueConstraint(fields=["owner", "name"], name="savedfilter_owner_name_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id}: {self.name}"


class BulkJobState(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    DONE = "done", "done"
    # Lost too often, or stopped by an error: the items it did not reach are untouched.
    FAILED = "failed", "failed"


class BulkJob(models.Model):
    """More items than a request should handle at once (`reviews.queue.bulk`): the job's record of
    what it was asked, how far it got, and what each item came to. The background worker
    writes `results` and `heartbeat_at` as it goes, so the progress page reads both."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    # "assign" or a decision kind (reviews.decisions.decide).
    action = models.CharField(max_length=32)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    reason = models.CharField(max_length=2000, blank=True)
    evidence = models.CharField(max_length=4000, blank=True)
    item_ids = models.JSONField(default=list)
    # One entry per item reached, in order: {"item", "effect", "done", "why"}.
    results = models.JSONField(default=list)
    state = models.CharField(
        max_length=16, choices=BulkJobState.choices, default=BulkJobState.QUEUED
    )
    error = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # Written with every item: a job whose heartbeat stops is lost
    # (reviews.queue.bulk.redrive_lost).
    heartbeat_at = models.DateTimeField(db_default=Now())
    # How many times the sweep queued it again after it was lost (reviews.queue.bulk.redrive_lost).
    redriven = models.PositiveSmallIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"bulk {self.action} #{self.pk} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in (BulkJobState.DONE, BulkJobState.FAILED)
