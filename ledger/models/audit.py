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
    # A plain bigint column in the database, not a foreign key: the events table is
    # partitioned by month (its key is (id, created_at)) and archived months are dropped while
    # their seals stay. The sealer writes a seal only for an event it reads in the same
    # statement (`ledger.audit.seal`), and the verifier reports a seal whose event is gone
    # unless an archive checkpoint accounts for it.
    event = models.OneToOneField(
        EffectEvent, on_delete=models.DO_NOTHING, db_constraint=False, related_name="seal"
    )
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


class ArchivedMonth(models.Model):
    """A checkpoint: one month of events exported, checked against the chain and dropped by
    `manage.py archive` (`ledger.audit.archive`). `verifyledger` starts from the latest cut
    (`cut_seq`, `cut_hash`) instead of the genesis hash."""

    month = models.DateField(unique=True)  # its first day, UTC
    partition = models.CharField(max_length=63)
    events = models.BigIntegerField()
    first_event_id = models.BigIntegerField(null=True)
    last_event_id = models.BigIntegerField(null=True)
    # The seals of the month's events: their lowest and highest seq.
    first_seq = models.BigIntegerField(null=True)
    last_seq = models.BigIntegerField(null=True)
    # The sealed boundary: every seal up to cut_seq is of an archived event (sealing follows
    # commit order, not the calendar), and cut_hash is that seal's hash, the head at the cut.
    cut_seq = models.BigIntegerField()
    cut_hash = models.CharField(max_length=64)
    # Seals above cut_seq whose events this month held (committed after the next month's
    # first sealed event), as [first, last] ranges of seqs: the verifier expects exactly these
    # events to be gone.
    beyond_cut = models.JSONField(default=list, blank=True)
    # The export: where it was written and the SHA-256 of each file.
    location = models.CharField(max_length=1000)
    digests = models.JSONField(default=dict)
    archived_at = models.DateTimeField(db_default=Now())
    archived_by = models.CharField(max_length=200)

    class Meta:
        triggers = [
            pgtrigger.Protect(
                name="archived_month_append_only", operation=pgtrigger.Update | pgtrigger.Delete
            ),
        ]

    def __str__(self) -> str:
        return f"archived {self.month:%Y-%m}: seals up to {self.cut_seq}"
