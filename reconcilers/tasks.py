"""The reconcilers' background work, under the names their schedules and rq jobs use
(`config.tasks`, ADR 0022).

A name is what a schedule row in PostgreSQL or a job queued in Redis stores: it stays when the
function it names moves.
"""

from config.tasks import register
from reconcilers import execution, gapsweep, jobs, schedules, statement_fetch, tailcheck

# Scheduled (`reconcilers.schedules.SCHEDULES`).
# Expired leases into reconciliation, then wake-ups for everything due.
register("reconciliation-sweep", schedules.sweep)
# One more lookup for effects retried on a proof of absence.
register("tail-checks", tailcheck.run_due)
# While restore mode is on: the providers' records of the lost window, each matched to an
# effect or raised as an incident.
register("restore-gap-sweep", gapsweep.run)
# Yesterday's statement for each tool that fetches them.
register("fetch-statements", statement_fetch.fetch_due_statements)

# Queued in rq (`reconcilers.jobqueue.enqueue`).
# A wake-up: these effects are due for a check.
register("check-effects", jobs.check_effects)
# Up to so many due effects, most overdue first (the recovery benchmark's batched mode).
register("drain-checks", jobs.drain)
# A compensation the ledger sends itself.
register("execute-compensation", execution.execute)
