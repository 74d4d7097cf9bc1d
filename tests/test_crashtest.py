"""The crash test itself, run as a user would run it, and its verdict's own honesty. The other
kinds of run: several hosts' processes (test_crashtest_hosts.py), providers without keys or
with an API of their own (test_crashtest_providers.py)."""

from __future__ import annotations

from devstack.crashtest.report import compare, compare_counts
from devstack.crashtest.worker import WORKER_POINTS
from tests.crashruns import crashtest


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


def test_counts_per_key_name_a_second_record_a_missing_one_and_a_stray_one():
    workflows = [{"run_id": f"wf-{n}", "account": f"a{n}", "amount": "1.00"} for n in range(4)]
    effects = [
        {"id": f"e{n}", "run_id": f"wf-{n}", "status": status, "idempotency_key": f"k{n}"}
        for n, status in enumerate(("confirmed", "confirmed", "failed", "unknown"))
    ]
    counts = {"k0": 2, "k2": 1, "k3": 1, "stray": 1}

    verdict = compare_counts(workflows, counts, effects, {"e3": "inconclusive"}, {}, [])

    assert [d["run_id"] for d in verdict.duplicates] == ["wf-0"]
    assert {u.get("run_id", u.get("key")): u["why"] for u in verdict.unexplained} == {
        "wf-1": "confirmed, no record",
        "wf-2": "sent, but the effect is failed",
        "stray": "record of no workflow",
    }
    assert verdict.left_for_review == {"inconclusive": 1}
    assert not verdict.ok


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
