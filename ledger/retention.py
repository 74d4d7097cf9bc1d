"""The old path of `ledger.audit.retention`, kept for one release.

The django-q2 schedule stored in the database names `ledger.retention.redact_expired` until
`reconcilers.schedules.ensure_schedules` rewrites it at the next start.
"""

from ledger.audit.retention import redact_expired

__all__ = ["redact_expired"]
