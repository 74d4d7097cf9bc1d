"""The old path of `reviews.alerts.escalation`, kept for one release.

The django-q2 schedule stored in the database names `reviews.escalation.escalate`; a cluster
still running when the new code is deployed imports it by that name until
`reconcilers.schedules.ensure_schedules` rewrites it at the next start.
"""

from reviews.alerts.escalation import escalate

__all__ = ["escalate"]
