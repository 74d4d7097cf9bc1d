"""Restore mode: the windows in which the ledger knew its database had gone back in time."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.db.models.lookups import IsNull


class RestoreSource(models.TextChoices):
    # The witness outside the database saw more than the database holds (`ledger.restore`).
    WITNESS = "witness"
    # An admin said so: `manage.py restore begin --lost-since … --reason …`.
    MANUAL = "manual"


class RestoreWindow(models.Model):
    """One spell of restore mode: what may have been lost (everything after `lost_since`), what
    entering it did, and how it ended. At most one is open (`ended_at` NULL) at a time."""

    lost_since = models.DateTimeField()
    started_at = models.DateTimeField(db_default=Now())
    source = models.CharField(max_length=8, choices=RestoreSource.choices)
    started_by = models.CharField(max_length=200)
    reason = models.CharField(max_length=2000)
    # The witness's findings that opened it (`ledger.restore.witness.Finding.as_dict`).
    findings = models.JSONField(default=list, blank=True)
    # The chain as the database held it on entry, and the witness's head (the lost branch):
    # `verifyledger` accepts exported heads past `fork_seq` exported before `started_at`.
    fork_seq = models.BigIntegerField()
    lost_head = models.JSONField(default=dict, blank=True)
    # What entering did: effects put in doubt, halts and key revocations re-applied,
    # sequences moved forward.
    applied = models.JSONField(default=dict, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=200, blank=True)
    end_reason = models.CharField(max_length=2000, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                IsNull(models.F("ended_at"), True),
                name="one_open_restore_window",
                condition=models.Q(ended_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        state = "open" if self.ended_at is None else "ended"
        return f"restore window {self.pk} ({state}, lost since {self.lost_since:%Y-%m-%d %H:%M})"
