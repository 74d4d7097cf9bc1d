"""The crash test on the processes of several hosts: gunicorn instances, rq workers and a
django-q2 cluster sharing one PostgreSQL and one Redis, each killed at random moments."""

from __future__ import annotations

from tests.crashruns import crashtest


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
