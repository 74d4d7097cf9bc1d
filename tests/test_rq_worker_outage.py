"""The rq worker `make run` starts outlives a Redis restart that lands while it runs a job.

rq's own non-forking worker quits when Redis is unreachable as it records a job's result; the
control case shows that this test meets exactly that moment, so the ledger's worker passing it
means something. Redis here is a private one the test stops and starts, never the machine's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from rq import Queue

from devstack.drills.servers import RestartableRedis

ROOT = Path(__file__).resolve().parent.parent
JOB_SECONDS = 2.0


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def private_redis(tmp_path):
    server = RestartableRedis(tmp_path / "redis")
    url = server.start()
    yield server, url
    server.stop()


def _start_worker(worker_class: str, redis_url: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "manage.py", "rqworker", "default", "--with-scheduler"]
    with log.open("wb") as out:
        return subprocess.Popen(
            [*argv, "--worker-class", worker_class],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _restart_redis_under_a_running_job(server: RestartableRedis, url: str) -> None:
    """A job that takes JOB_SECONDS; Redis stopped while it runs and started again only after
    it ended, so the worker records the job's result while Redis is away."""
    queue = Queue("default", connection=redis.Redis.from_url(url))
    job = queue.enqueue("time.sleep", JOB_SECONDS)
    _wait(lambda: job.get_status(refresh=True) == "started", 30, "the job to start")
    server.stop()
    time.sleep(JOB_SECONDS + 1.0)
    server.restart()


@pytest.mark.parametrize(
    ("worker_class", "survives"),
    [("reconcilers.worker.LedgerWorker", True), ("rq.SimpleWorker", False)],
)
def test_the_worker_outlives_a_redis_restart_during_a_job(
    private_redis, tmp_path, worker_class, survives
):
    server, url = private_redis
    log = tmp_path / "worker.log"
    worker = _start_worker(worker_class, url, log)
    try:
        _restart_redis_under_a_running_job(server, url)
        if not survives:
            # The control: rq's own worker has quit by now, or does within a few seconds.
            worker.wait(timeout=15)
            assert "quitting" in log.read_text(errors="replace")
            return
        time.sleep(1.0)
        assert worker.poll() is None, log.read_text(errors="replace")[-3000:]
        # And it still works: a job enqueued on the restarted Redis is run.
        queue = Queue("default", connection=redis.Redis.from_url(url))
        after = queue.enqueue("time.sleep", 0)
        _wait(lambda: after.get_status(refresh=True) == "finished", 30, "the next job to run")
        assert worker.poll() is None
        assert "Redis unreachable" in log.read_text(errors="replace")
    finally:
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()



def test_the_ledgers_worker_stops_within_seconds_when_its_command_thread_waits(rq_queue):
    """rq listens for commands in a thread that waited up to a minute for a message, and
    redis-py 8 waits for that thread when the worker stops. When the thread has already read
    the answer to the worker's unsubscribe, it waits for a new subscription: the worker's end
    (SIGTERM, the end of a burst) took that minute. The ledger's worker looks up every second.
    Here the thread is brought to that wait on purpose, then the worker stops as rq stops it."""
    from reconcilers.worker import LedgerWorker

    worker = LedgerWorker([rq_queue], connection=rq_queue.connection)
    worker.subscribe()
    _wait(lambda: worker.pubsub.subscribed, 5, "the subscription")
    worker.pubsub.unsubscribe()
    _wait(lambda: not worker.pubsub.subscribed, 5, "the thread to read the unsubscribe")
    started = time.monotonic()
    worker.unsubscribe()
    assert time.monotonic() - started < 10
    assert not worker.pubsub_thread.is_alive()
