"""/metrics under gunicorn with two workers: whichever worker answers a scrape, the counters
are the sum over both, and a worker that dies takes none of its counts with it.

Real gunicorn (as `make run` starts it, through `devstack.web.gunicorn_argv`) on the test
database, with PROMETHEUS_MULTIPROC_DIR pointing at a directory of the test's own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ledger.containment.keys import issue_key
from ledger.models import Agent
from tests.factories import gunicorn_on_test_database
from tests.logscan import find_secrets, known_secrets

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "metrics-token-for-the-gunicorn-test"
INTENTS = 40
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(tools, tmp_path) -> Iterator[tuple[str, subprocess.Popen[bytes], Path, Path]]:
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "LEDGER_METRICS_TOKEN": TOKEN,
        "LEDGER_METRICS_REFRESH": "1",
    }
    with gunicorn_on_test_database(tmp_path, workers=2, threads=4, env=env) as (url, proc, log):
        yield url, proc, metrics_dir, log


def _scrape(url: str) -> float:
    """ledger_transitions_total{planned → dispatching}, as one worker answers it."""
    # A new connection per scrape, so that scrapes land on either worker.
    response = httpx.get(
        f"{url}/metrics",
        headers={"Authorization": f"Bearer {TOKEN}", "Connection": "close"},
        timeout=10,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "ledger_transitions_total" and sample.labels == {
                "from_status": "planned",
                "to_status": "dispatching",
            }:
                return sample.value
    return 0.0


def _workers_with_counts(metrics_dir: Path) -> set[int]:
    return {
        int(m.group(1))
        for f in metrics_dir.iterdir()
        if (m := re.fullmatch(r"counter_(\d+)\.db", f.name))
    }


def _claim_many(url: str, key: str, start: int, count: int) -> None:
    def one(n: int) -> int:
        # One connection per request and many at once: both workers get some.
        with httpx.Client(trust_env=False, timeout=30) as client:
            return client.post(
                f"{url}/api/v1/effects",
                headers={"Authorization": f"Bearer {key}"},
                json={
                    "run_id": "metrics",
                    "step_id": f"step-{n}",
                    "tool": "charge_card",
                    "target": "acct_42",
                    "request": {"amount": "1.00", "currency": "EUR"},
                    "claim": True,
                    "owner": "w",
                },
            ).status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        assert set(pool.map(one, range(start, start + count))) == {201}


def test_counters_add_up_across_both_workers_and_survive_a_worker_dying(server):
    url, proc, metrics_dir, _ = server
    key = issue_key(Agent.objects.create(name="metrics"))

    # The kernel hands connections to whichever worker accepts first; on a loaded machine one
    # worker can take a whole batch, so batches go on until both have counted something.
    sent = 0
    for _ in range(6):
        _claim_many(url, key, sent, INTENTS)
        sent += INTENTS
        if len(workers := _workers_with_counts(metrics_dir)) == 2:
            break
    assert len(workers) == 2, f"both workers should have served claims: {workers}"
    # Every scrape, whichever worker answers, sees all the claims.
    assert {_scrape(url) for _ in range(8)} == {sent}

    dead = min(workers)
    os.kill(dead, signal.SIGKILL)  # gunicorn starts another worker in its place
    _claim_many(url, key, sent, 10)

    assert (metrics_dir / f"counter_{dead}.db").exists()  # its counts are still summed
    assert {_scrape(url) for _ in range(8)} == {sent + 10}
    assert proc.poll() is None


def test_the_servers_log_lines_are_json_and_hold_no_key(server):
    url, proc, _, log = server
    key = issue_key(Agent.objects.create(name="logs"))
    _claim_many(url, key, 0, 4)
    os.killpg(proc.pid, signal.SIGTERM)  # flushes and closes the log
    proc.wait(timeout=15)

    lines = log.read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert {"timestamp", "level", "logger", "message"} <= set(entries[0])
    calls = [e for e in entries if e["logger"] == "ledger.requests" and "POST" in e["message"]]
    assert len(calls) == 4 and {e["agent"] for e in calls} == {"logs"}
    assert all(e["effect_id"] and e["run_id"] == "metrics" and e["request_id"] for e in calls)
    assert find_secrets(lines, [key, *known_secrets()]) == []
