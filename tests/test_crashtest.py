"""The crash test itself, run as a user would run it, and its verdict's own honesty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from reconcilers.crashtest.report import compare
from reconcilers.crashtest.worker import WORKER_POINTS

ROOT = Path(__file__).resolve().parent.parent


def crashtest(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "manage.py", "crashtest", "--report", str(report), *args],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, json.loads(report.read_text()), done.stdout


def test_a_hundred_crashes_at_every_point_leave_no_duplicate_and_nothing_unexplained(tmp_path):
    code, report, table = crashtest(
        tmp_path, "--workflows", "100", "--workers", "8", "--crashes", "110", "--infra-kills", "10"
    )
    assert code == 0, table
    assert report["crashes"] >= 100
    for point in (*WORKER_POINTS, "web", "rqworker"):
        assert report["crashes_by_point"].get(point, 0) >= 1, point
    assert report["duplicates"] == []
    assert report["unexplained"] == []
    # A provider that honours keys lets every workflow end confirmed, charged exactly once.
    assert report["confirmed"] == 100
    assert report["provider_transactions"] == 100


def test_two_web_instances_two_rq_workers_and_a_qcluster_on_one_database_lose_and_double_nothing(
    tmp_path,
):
    """The processes of several hosts, sharing one PostgreSQL and one Redis, each instance
    killed at random moments."""
    code, report, table = crashtest(
        tmp_path,
        *("--web", "2", "--rq-workers", "2", "--qcluster"),
        *("--workflows", "24", "--workers", "4", "--crashes", "24", "--infra-kills", "8"),
    )
    assert code == 0, table
    assert report["duplicates"] == []
    assert report["unexplained"] == []
    # Every effect accounted for: each workflow confirmed, charged exactly once.
    assert report["confirmed"] == report["provider_transactions"] == 24
    assert report["crashes_by_point"]["web"] >= 1 and report["crashes_by_point"]["rqworker"] >= 1
    served = report["served"]
    assert served["web0"] > 0 and served["web1"] > 0, served
    assert served["rqworker0"] + served["rqworker1"] > 0, served
    assert served["qcluster"] > 0, served


def test_a_provider_that_ignores_keys_sends_the_uncertain_ones_to_review_not_to_a_retry(
    tmp_path,
):
    code, report, table = crashtest(
        tmp_path,
        "--workflows",
        "8",
        "--workers",
        "4",
        "--crashes",
        "8",
        "--infra-kills",
        "0",
        "--ignore-keys",
    )
    assert code == 0, table
    assert report["duplicates"] == []
    assert report["unexplained"] == []
    assert sum(report["left_for_review"].values()) >= 6  # every crash at or after sending


def test_the_report_catches_a_charge_made_behind_the_ledgers_back(tmp_path):
    code, report, table = crashtest(
        tmp_path,
        "--workflows",
        "4",
        "--workers",
        "2",
        "--crashes",
        "0",
        "--infra-kills",
        "0",
        "--inject-duplicate",
    )
    assert code == 1
    assert len(report["duplicates"]) == 1
    assert "duplicates (must be 0)            1" in table


WORKFLOWS = [
    {"run_id": "wf-1", "account": "acct_1", "amount": "10.00"},
    {"run_id": "wf-2", "account": "acct_2", "amount": "20.00"},
]


def _effect(run_id: str, status: str, ref: str = "") -> dict:
    return {"id": f"id-{run_id}", "run_id": run_id, "status": status, "provider_ref": ref}


def test_the_verdict_names_each_kind_of_disagreement():
    charges = [
        {"id": "ch_1", "account": "acct_1", "amount": "10.00"},
        {"id": "ch_2", "account": "acct_2", "amount": "20.00"},
        {"id": "ch_9", "account": "acct_9", "amount": "5.00"},
    ]
    effects = [_effect("wf-1", "confirmed", "ch_other"), _effect("wf-2", "unknown")]
    verdict = compare(WORKFLOWS, charges, effects, {}, {}, [])
    whys = sorted(item["why"] for item in verdict.unexplained)
    assert whys == [
        "charge of no workflow",
        "charged, but the effect is unknown",
        "provider_ref is not the charge",
    ]
    assert not verdict.ok


def test_an_effect_waiting_for_a_person_is_explained():
    charges = [{"id": "ch_1", "account": "acct_1", "amount": "10.00"}]
    effects = [_effect("wf-1", "unknown"), _effect("wf-2", "planned")]
    verdict = compare(WORKFLOWS, charges, effects, {"id-wf-1": "no_lookup"}, {}, [])
    assert verdict.left_for_review == {"no_lookup": 1}
    assert [item["why"] for item in verdict.unexplained] == ["not charged, effect planned"]
