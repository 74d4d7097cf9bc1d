"""The crash test itself, run as a user would run it, and its verdict's own honesty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devstack.crashtest.report import compare
from devstack.crashtest.worker import WORKER_POINTS

ROOT = Path(__file__).resolve().parent.parent
# The run's own Redis database (emptied first); another one where several people share a Redis.
REDIS_DB = os.environ.get("CRASHTEST_REDIS_DB", "14")


def crashtest(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            *(sys.executable, "manage.py", "crashtest"),
            *("--report", str(report), "--redis-db", REDIS_DB, *args),
        ],
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


def test_a_provider_searchable_by_reference_lets_the_machine_settle_every_crash(tmp_path):
    """No deduplication, but a complete search: a late enough not-found proves the charge
    never arrived, so even a crash before sending is retried without a person."""
    code, report, table = crashtest(
        tmp_path,
        *("--provider", "lookup-only"),
        *("--workflows", "12", "--workers", "4", "--crashes", "12", "--infra-kills", "0"),
    )
    assert code == 0, table
    assert report["duplicates"] == [] and report["unexplained"] == []
    assert report["confirmed"] == report["provider_transactions"] == 12
    assert report["open_review_items"] == 0
    assert "open review items (must be 0)     0" in table
    # Every crash left its effect in doubt, and a lookup settled each one.
    assert all(report["crashes_by_point"][point] == 3 for point in WORKER_POINTS)
    assert report["settled_by_machine"] == {"lookup": 12}
    # Each crash before sending was proven absent and sent again; its tail check found one
    # charge, not two.
    assert report["tail_checks"].get("clean", 0) >= 3
    assert "duplicate" not in report["tail_checks"]


def test_a_provider_with_neither_keys_nor_lookup_is_settled_by_its_statements(tmp_path):
    """Every uncertain effect goes to review, then the provider's statements settle them all:
    charged ones confirmed, the others proven absent and retried by the agent once."""
    code, report, table = crashtest(
        tmp_path,
        *("--provider", "statement"),
        *("--workflows", "12", "--workers", "4", "--crashes", "12", "--infra-kills", "0"),
    )
    assert code == 0, table
    assert report["duplicates"] == [] and report["unexplained"] == []
    assert report["confirmed"] == report["provider_transactions"] == 12
    assert report["open_review_items"] == 0
    assert report["settled_by_machine"] == {"statement": 12}
    assert report["reviews_closed_by_machine"] == 12
    # The first statement holds the charges of the crashes after sending; the second, the
    # retries of those before it.
    first, second = report["statements"]
    assert first["lines"] == 9 and second["lines"] == 12 - 9


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


def test_a_review_item_left_for_people_fails_a_run_the_machine_should_settle():
    charges = [{"id": "ch_1", "account": "acct_1", "amount": "10.00"}]
    effects = [_effect("wf-1", "unknown"), _effect("wf-2", "failed")]
    reviews = {"id-wf-1": "no_lookup"}

    assert compare(WORKFLOWS, charges, effects, reviews, {}, []).ok
    verdict = compare(WORKFLOWS, charges, effects, reviews, {}, [], machine_only=True)
    assert not verdict.ok
    assert verdict.open_review_items == 1
    assert "open review items (must be 0)     1" in verdict.table()


def test_an_effect_waiting_for_a_person_is_explained():
    charges = [{"id": "ch_1", "account": "acct_1", "amount": "10.00"}]
    effects = [_effect("wf-1", "unknown"), _effect("wf-2", "planned")]
    verdict = compare(WORKFLOWS, charges, effects, {"id-wf-1": "no_lookup"}, {}, [])
    assert verdict.left_for_review == {"no_lookup": 1}
    assert [item["why"] for item in verdict.unexplained] == ["not charged, effect planned"]
