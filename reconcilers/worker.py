"""The rq worker the ledger runs: rq's non-forking worker, kept alive through a Redis restart.

rq retries a refused connection only inside its blocking dequeue. A Redis error met anywhere
else in its loop (marking itself idle before the dequeue, recording a job's result, the
heartbeat, the suspension check, maintenance) ends the worker: "found an unhandled exception,
quitting". A Redis restart that lands between two jobs would then leave the ledger with no
worker until a supervisor noticed. Here those calls wait for Redis instead, and a job whose
bookkeeping failed is logged and left behind: the job is only a hint, its effect's state is in
the ledger, and the sweep re-drives whatever is still unsettled.

It also stops promptly. rq listens for commands (stop this job, shut down) on a pub/sub channel,
in a thread that waits up to a minute for each message; redis-py 8 waits for that thread when
it is stopped, so every end of a worker (SIGTERM, the end of a burst) could take a minute. Here
the thread looks up every second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis.exceptions
from rq import SimpleWorker
from rq.exceptions import StopRequested

log = logging.getLogger(__name__)

REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
FIRST_WAIT = 0.5
LONGEST_WAIT = 5.0
COMMAND_WAIT = 1.0  # how long the command thread waits for a message before it looks up

T = TypeVar("T")


class LedgerWorker(SimpleWorker):
    def subscribe(self) -> None:
        """rq's own subscription, with a thread that a stop ends within `COMMAND_WAIT`."""
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=COMMAND_WAIT, daemon=True, exception_handler=self._pubsub_exception_handler
        )

    def _through_outage(self, what: str, call: Callable[[], T]) -> T:
        """`call()`, repeated after a pause for as long as Redis is unreachable; a stop asked
        for meanwhile (SIGTERM) ends the wait as rq's own loop ends."""
        wait = FIRST_WAIT
        while True:
            try:
                return call()
            except REDIS_DOWN as exc:
                if self._stop_requested:
                    raise StopRequested() from exc
                log.warning(
                    "rq worker: Redis unreachable (%s) during %s; retrying in %.1f s",
                    exc,
                    what,
                    wait,
                )
                time.sleep(wait)
                wait = min(wait * 2, LONGEST_WAIT)

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None):
        parent = super().dequeue_job_and_maintain_ttl
        return self._through_outage("the dequeue", lambda: parent(timeout, max_idle_time))

    def heartbeat(self, *args: Any, **kwargs: Any) -> None:
        parent = super().heartbeat
        self._through_outage("the heartbeat", lambda: parent(*args, **kwargs))

    def check_for_suspension(self, burst: bool) -> None:
        parent = super().check_for_suspension
        self._through_outage("the suspension check", lambda: parent(burst))

    def run_maintenance_tasks(self) -> None:
        parent = super().run_maintenance_tasks
        self._through_outage("maintenance", parent)

    def execute_job(self, job: Any, queue: Any) -> None:
        try:
            super().execute_job(job, queue)
        except REDIS_DOWN as exc:
            # Not repeated: the job may have run. Its effect's state is in the ledger, and the
            # sweep re-drives an effect the job did not settle.
            log.warning(
                "rq worker: Redis unreachable (%s) while running job %s; "
                "the sweep re-drives its effect if it is still unsettled",
                exc,
                job.id,
            )
