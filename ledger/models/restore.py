"""Restore mode: the windows in which the ledger knew its database had gone back in time."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.db.models.lookups import IsNull

from ledger.models.config import _bumps_config_version


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
    # The witness's findings that opened it (`ledger.audit.witness.Finding.as_dict`).
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
        # Opening or ending a window moves the configuration version: every process then reads
        # whether restore mode is on afresh (`ledger.rules.restore_state`).
        triggers = [_bumps_config_version("restorewindow_bumps_config")]
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


class KeyFingerprint(models.Model):
    """A fingerprint of each version of `LEDGER_KEYS` the database has been used with: an HMAC of
    a fixed text under that key, never the key. Idempotency keys and redaction tokens derive from
    these keys, so a ledger started against this database with other keys would make other
    idempotency keys for the same effects (`ledger.restore.keyring` refuses to start)."""

    version = models.PositiveIntegerField(primary_key=True)
    fingerprint = models.CharField(max_length=64)
    recorded_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"LEDGER_KEYS version {self.version}"
