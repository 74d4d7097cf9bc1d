"""Failover onto a streaming replica, on real servers: a primary and a synchronous standby on
loopback (devstack.drills.replica), the ledger's processes (gunicorn behind nginx, the
rq worker, the django-q2 cluster) started once with both hosts in DATABASE_URL and
target_session_attrs=read-write. Intent clients post through the switch: the primary is stopped
at once and fenced, the standby promoted with `pg_ctl promote`. The same processes, never
restarted, carry on against the new primary: every acknowledged intent is there, new intents
succeed, the long poll's listeners LISTEN again there and wake a waiter, the rq worker checks an
`unknown` effect and the django-q2 cluster runs a task."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest
import redis

from devstack.drills.checks import (
    answer_counts,
    ledger_counts,
    post_unknown,
    stored_effects,
    wait_confirmed,
)
from devstack.drills.load import Api, Call, Load
from devstack.drills.replica import STANDBY_NAME, ReplicaPair
from devstack.drills.services import DATABASE, SERVICES, DrillStack
from devstack.harness import ROOT

PREFIX = "failover"
LISTEN_APP = "ledger-listen"  # ledger.api.longpoll.APPLICATION_NAME


def _listeners(conn: Any) -> int:
    (count,) = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [LISTEN_APP]
    ).fetchone()
    return int(count)


def _wait_for(condition: Any, timeout: float) -> float | None:
    """Seconds until `condition()` held, None if it never did within `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.2)
    return None


def _claim(api: Api, run_id: str) -> dict[str, Any]:
    body = {
        "run_id": run_id,
        "step_id": "charge",
        "tool": "charge_card",
        "target": f"acct_{run_id}",
        "request": {"amount": "10.00", "currency": "EUR"},
        "claim": True,
        "owner": "failover",
        "claim_id": str(uuid.uuid4()),
        "lease_seconds": 60,
    }
    call = api.call("claim", "POST", "/effects", body)
    assert call.status == 201 and call.body, call
    return call.body


def _warm_listeners(api_url: str, key: str, effect_id: str) -> None:
    """Long polls on every gunicorn thread at once, so each worker starts its listener."""
    calls: list[Call] = []

    def poll() -> None:
        api = Api(api_url, key, calls)
        api.call("poll", "GET", f"/effects/{effect_id}?wait=1")
        api.close()

    threads = [threading.Thread(target=poll) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert all(c.status == 200 for c in calls), calls


def _long_poll_wakes(api: Api, api_url: str, key: str) -> tuple[float, str]:
    """A waiter on a claimed effect, then its outcome: how long the waiter took to answer
    (it asked to wait 30 s) and the status it was answered."""
    effect = _claim(api, f"{PREFIX}-poll-{uuid.uuid4().hex[:8]}")
    answered: list[Call] = []

    def wait() -> None:
        poller = Api(api_url, key, answered)
        poller.call("poll", "GET", f"/effects/{effect['id']}?wait=30")
        poller.close()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(1.5)  # the waiter is waiting, not reading
    sent = time.monotonic()
    outcome = {"lease_token": effect["lease_token"], "status": "confirmed"}
    assert api.call("outcome", "POST", f"/effects/{effect['id']}/outcome", outcome).status == 200
    thread.join(35)
    (call,) = answered
    return round(call.ended - sent, 2), str((call.body or {}).get("status"))


def _django_q_runs_a_task(env: dict[str, str], conn: Any, timeout: float) -> float | None:
    group = f"failover-{uuid.uuid4().hex[:8]}"
    enqueue = (
        f"from django_q.tasks import async_task; async_task('math.floor', 1.5, group={group!r})"
    )
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", enqueue],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return _wait_for(
        lambda: conn.execute(
            'SELECT 1 FROM django_q_task WHERE "group" = %s AND success', [group]
        ).fetchone(),
        timeout,
    )


@pytest.fixture
def servers():
    pair = ReplicaPair()
    try:
        yield pair
    finally:
        pair.close()


def _bring_up(pair: ReplicaPair, stack: DrillStack) -> str:
    """Primary, the ledger's database on it, a synchronous standby cloned from it; then the
    processes. Returns the agent's key."""
    pair.start_primary()
    key = stack.prepare()  # through the multi-host URL: the standby's port refuses for now
    pair.make_synchronous()
    inherited = pair.clone_standby()
    # The trap the deployment docs describe: the clone carries synchronous_standby_names.
    assert f"synchronous_standby_names = '{STANDBY_NAME}'" in inherited
    pair.start_standby()
    pair.wait_streaming()
    stack.start()
    return key


def test_the_running_processes_follow_a_promoted_standby_and_lose_no_acknowledged_write(
    servers: ReplicaPair, tmp_path
):
    pair = servers
    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    env = {**os.environ, "DATABASE_URL": pair.multi_host_url(DATABASE)}
    stack = DrillStack(tmp_path, env)
    try:
        _run(pair, stack, _bring_up(pair, stack))
    except BaseException:
        logs = [tmp_path / f"{name}.log" for name in SERVICES]
        print(
            pair.log_tail(),
            *(f"{log.name}: {log.read_text()[-3000:]}" for log in logs if log.exists()),
        )
        raise
    finally:
        stack.stop()


def _run(pair: ReplicaPair, stack: DrillStack, key: str) -> None:
    api = Api(stack.api_url, key, calls := [])
    before = [_claim(api, f"{PREFIX}-before-{n}")["id"] for n in range(10)]
    _warm_listeners(stack.api_url, key, before[0])
    with pair.primary.connect(DATABASE) as conn:
        listening = _listeners(conn)
    assert listening >= 1
    pids = {**stack.pids(), "web workers": sorted(stack.web_workers())}

    load = Load(stack.api_url, key, f"{PREFIX}-load", clients=3)
    load.start()
    time.sleep(1.5)
    pair.fence_primary()
    time.sleep(1.0)  # the standby is read-only meanwhile: every host refuses writes
    pair.promote_standby()
    promoted = time.monotonic()
    time.sleep(3.0)
    load.stop()

    with pair.standby.connect(DATABASE) as conn:
        counts = ledger_counts(load.intents, stored_effects(conn, f"{PREFIX}-load"))
        assert counts["lost"] == 0, counts
        assert counts["acknowledged"] == counts["intents posted"] > 0, counts
        assert any(c.status == 201 and c.started > promoted for c in load.calls)
        assert len(stored_effects(conn, f"{PREFIX}-before")) == len(before)
        answers = answer_counts(load.calls + calls)
        assert answers["tracebacks"] == 0 and answers["hung > 5 s"] == 0, answers
        assert answers["503 without Retry-After"] == 0, answers

        assert _wait_for(lambda: _listeners(conn) >= listening, 15) is not None
        seconds, status = _long_poll_wakes(api, stack.api_url, key)
        assert status == "confirmed" and seconds < 1.0, (seconds, status)

        unknown = post_unknown(api, stack.provider.url, f"{PREFIX}-unknown")
        assert unknown is not None
        assert wait_confirmed(conn, [unknown], 30)[unknown] is not None
        assert _django_q_runs_a_task(stack.env, conn, 30) is not None

    assert {**stack.pids(), "web workers": sorted(stack.web_workers())} == pids
    assert all(stack.alive(name) for name in SERVICES)
    assert not pair.primary.is_running()
    assert (pair.primary.pgdata / "standby.signal").exists()
