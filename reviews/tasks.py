"""The review queue's background work, under the names its schedules and rq jobs use
(`config.tasks`, ADR 0022).

A name is what a schedule row in PostgreSQL or a job queued in Redis stores: it stays when the
function it names moves.
"""

from config.tasks import register
from reviews.alerts import due, escalation, sender
from reviews.queue import bulk

# Effects unresolved past their tool's window, into the review queue.
register("escalation", escalation.escalate)
# Review items due soon or overdue, into the alert outbox.
register("review-alerts", due.sweep)
# The outbox delivered: alerts and agents' callbacks.
register("alert-sender", sender.send_due)

# A bulk decision past the inline limit, run by an rq worker (`reviews.queue.bulk.JOB`) ...
register("run-bulk-job", bulk.run_job)
# ... and driven again from its row when Redis lost it (scheduled).
register("bulk-jobs", bulk.redrive_lost)
