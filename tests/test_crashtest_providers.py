"""The crash test against providers that do not honour idempotency keys: what settles each
crash (a person, a lookup by reference, the provider's statements), and a real provider's API
through its caller."""

from __future__ import annotations

from devstack.crashtest.worker import WORKER_POINTS
from tests.crashruns import crashtest

SMALL = ("--workflows", "12", "--workers", "4", "--crashes", "12", "--infra-kills", "0")


def _settled_by_machine(tmp_path, provider: str) -> tuple[dict, str]:
    """A small run against `provider`: every workflow charged once, nothing left for a person."""
    code, report, table = crashtest(tmp_path, "--provider", provider, *SMALL)
    assert code == 0, table
    assert report["duplicates"] == [] and report["unexplained"] == []
    assert report["confirmed"] == report["provider_transactions"] == 12
    assert report["open_review_items"] == 0
    return report, table


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
    report, table = _settled_by_machine(tmp_path, "lookup-only")
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
    report, _ = _settled_by_machine(tmp_path, "statement")
    assert report["settled_by_machine"] == {"statement": 12}
    assert report["reviews_closed_by_machine"] == 12
    # The first statement holds the charges of the crashes after sending; the second, the
    # retries of those before it.
    first, second = report["statements"]
    assert first["lines"] == 9 and second["lines"] == 12 - 9


def test_a_real_providers_api_through_its_caller_is_settled_by_the_adapters_lookups(tmp_path):
    """The workers call a provider that keeps no keys through its own API (the records
    provider, behind a token and pages); the ledger asks it through `http_lookup`."""
    code, report, table = crashtest(
        tmp_path,
        *("--provider", "search", "--workflows", "24", "--workers", "4"),
        *("--crashes", "26", "--infra-kills", "2"),
    )
    assert code == 0, table
    for point in WORKER_POINTS:
        assert report["crashes_by_point"].get(point, 0) >= 1, point
    assert report["duplicates"] == [] and report["unexplained"] == []
    assert report["machine_only"] and report["open_review_items"] == 0
    assert report["confirmed"] == report["provider_transactions"] == 24
