"""The fault drills, short: a few seconds of load each, run as a user runs them
(`manage.py faultdrill postgres redis web`) against private servers the drill starts and stops,
never the ones the other tests use. One run serves the three tests; each asserts its drill's
exact counts, so a lost intent, a traceback, a 503 without Retry-After or a hang fails it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DRILLS = ("postgres", "redis", "web")
ARGS = ("--seconds", "6", "--outage", "2", "--kill-every", "0.5", "--master-kills", "1")


@pytest.fixture(scope="module")
def drills(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    report = tmp_path_factory.mktemp("faultdrill") / "report.json"
    done = subprocess.run(
        [sys.executable, "manage.py", "faultdrill", *DRILLS, *ARGS, "--report", str(report)],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert report.exists(), done.stdout + done.stderr[-3000:]
    return {r["drill"]: {**r, "table": done.stdout} for r in json.loads(report.read_text())}


def _no_harm(counts: dict[str, Any]) -> None:
    assert counts["lost"] == 0
    assert counts["acknowledged"] == counts["stored"] == counts["intents posted"] > 0
    assert counts["tracebacks"] == 0
    assert counts["503 without Retry-After"] == 0
    assert counts["hung > 5 s"] == 0
    assert counts["max latency s"] < 5


def test_a_postgres_restart_under_load_loses_nothing_and_every_worker_recovers(drills):
    drill = drills["postgres"]
    counts = drill["counts"]
    assert drill["failures"] == [], drill["table"]
    _no_harm(counts)
    assert counts["answered 503"] > 0  # the clients did meet the outage
    assert counts["503 not 'unavailable'"] == 0
    assert counts["no answer"] == counts["answer lost (502/504)"] == 0
    assert counts["after: new intent answered"] == 201
    assert counts["after: unknown checked by rq on wake-up"] == "3/3"
    assert counts["after: django-q2 ran reconciliation-sweep (s)"] is not None
    assert counts["after: django-q2 ran escalation (s)"] is not None
    assert counts["rq jobs failed"] == 0
    assert counts["processes restarted"] == 0


def test_a_redis_restart_fails_only_health_and_the_sweep_redrives_lost_wakeups(drills):
    drill = drills["redis"]
    counts = drill["counts"]
    assert drill["failures"] == [], drill["table"]
    _no_harm(counts)
    assert counts["agent requests failed"] == 0
    assert counts["/health during the outage"] > 0
    assert counts["/health reporting redis down"] == counts["/health during the outage"]
    assert counts["wake-ups lost (unknown during the outage)"] > 0
    assert counts["lost ones checked before the sweep"].startswith("0/")
    left = counts["effects left unknown"]
    assert counts["unknown effects checked afterwards"] == f"{left}/{left}"
    assert counts["processes restarted"] == 0


def test_sigkilled_web_processes_lose_no_acknowledged_write_and_repeats_are_safe(drills):
    drill = drills["web"]
    counts = drill["counts"]
    assert drill["failures"] == [], drill["table"]
    _no_harm(counts)
    assert counts["gunicorn workers SIGKILLed"] > 0
    assert counts["gunicorn master SIGKILLed"] == 1
    # A killed worker's requests are answered by nginx: 502 upstream_lost (repeat it as it was).
    assert counts["no answer"] + counts["answer lost (502/504)"] > 0
    assert counts["never acknowledged"] == 0
    assert counts["repeat: 200, same effect"] == counts["repeated after a fault"]
    assert counts["after: new intent answered"] == 201
    assert counts["rq worker, django-q2 restarted"] == 0


def test_a_killed_primary_with_a_synchronous_standby_loses_no_acknowledged_write(tmp_path):
    """The primary of a synchronous pair SIGKILLed under load, fenced, its standby promoted:
    every acknowledged intent, claim and outcome is on the new primary, the switch shows only
    as 503s with Retry-After, and no process was restarted."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "manage.py", "faultdrill", "failover-sync", "--seconds", "8",
         "--outage", "2", "--report", str(report)],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )  # fmt: skip
    assert report.exists(), done.stdout + done.stderr[-3000:]
    (drill,) = json.loads(report.read_text())
    counts = drill["counts"]
    assert drill["failures"] == [], done.stdout
    assert counts["acknowledged outcomes"] > 0 and counts["answered 503"] > 0
    for name in ("lost intents", "lost claims", "lost outcomes", "duplicates", "unaccounted"):
        assert counts[name] == 0, name
    assert counts["tracebacks"] == counts["503 without Retry-After"] == 0
    assert counts["processes restarted"] == 0
    acknowledged = sum(counts[f"acknowledged {k}"] for k in ("intents", "claims", "outcomes"))
    last = done.stdout.strip().splitlines()[-2]  # the report's path is printed after it
    assert last == (
        f"drill failover-sync: acknowledged {acknowledged}, lost 0, duplicates 0, unaccounted 0"
    )
