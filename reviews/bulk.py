"""The old path of `reviews.queue.bulk`, kept for one release.

The django-q2 schedule stored in the database names `reviews.bulk.redrive_lost`, and bulk jobs
queued in Redis before the deploy name `reviews.bulk.run_job`: a cluster or worker still
running old rows imports them by that name until `reconcilers.schedules.ensure_schedules`
rewrites the schedule at the next start and the queued jobs have run.
"""

from reviews.queue.bulk import redrive_lost, run_job

__all__ = ["redrive_lost", "run_job"]
