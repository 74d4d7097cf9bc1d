"""The old path of `ledger.audit.seal`, kept for one release.

django-q2 schedules stored in the database name `ledger.seal.seal_all` and
`ledger.seal.export_head`; a cluster still running when the new code is deployed imports them
by that name until `reconcilers.schedules.ensure_schedules` rewrites them at the next start.
"""

from ledger.audit.seal import export_head, seal_all

__all__ = ["export_head", "seal_all"]
