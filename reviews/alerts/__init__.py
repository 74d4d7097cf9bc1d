"""Telling people and agents: the review items' alerts (`due`), the one sender of the alert
outbox (`sender`) and where it delivers (`channels`: email, a signed webhook, Slack; `callbacks`:
an agent's own callback URL), and escalation of effects left unresolved past their tool's window
(`escalation`).

This package stands at the path of the module it replaced, `reviews.alerts`: django-q2
schedules stored in the database name `reviews.alerts.sweep` and `reviews.alerts.send_due`, and
a cluster still running when the new code is deployed imports them by that name until
`reconcilers.schedules.ensure_schedules` rewrites them at the next start. Both are re-exported
here for one release; no submodule may take either name.
"""

from reviews.alerts.due import sweep
from reviews.alerts.sender import send_due

__all__ = ["send_due", "sweep"]
