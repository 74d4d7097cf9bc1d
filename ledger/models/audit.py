"""Tamper evidence and the record of exports: the seal chain over events, and who exported what."""

from __future__ import annotations

import pgtrigger
from django.db import models
from django.db.models.functions import Now

from ledger.models.effects import EffectEvent


class EventSeal(models.Model):
    """One link of the tamper-evident chain over the event log: written in order by the sealer
    (`ledger.audit.seal`), never updated. Each hash covers the previous hash and the event's
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
