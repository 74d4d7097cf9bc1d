"""What loadtools refuses and accepts for proofs of absence and statements (ledger.policy.toolfile,
with the adapters' own check from reconcilers.providers.checks)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ledger.models import Tool
from ledger.policy.toolfile import ToolFileError, load

pytestmark = pytest.mark.django_db

COMPLETE_LOOKUP = {
    "preset": '"lookup"',
    "reconciler": '"sandbox_payments"',
    "reconciler_config": '{ base_url = "http://127.0.0.1:9" }',
    "call_timeout": '"30s"',
    "search_lag": '"1m"',
    "settle_after": '"2m"',
    "lookup_proves_absence": "true",
    "lookup_horizon": '"30d"',
}
STATEMENTS = {
    "preset": '"unsafe"',
    "statements": "true",
    "amount_path": '"amount"',
    "currency_path": '"currency"',
    "amount_unit": '"major"',
}


def declare(tmp_path: Path, settings: dict[str, str], **changes: str | None) -> list:
    spec = {**settings, **changes}
    lines = [f"{k} = {v}" for k, v in spec.items() if v is not None]
    path = tmp_path / "tools.toml"
    path.write_text("[tools.pay]\n" + "\n".join(lines) + "\n")
    return load(path)


def test_a_complete_lookup_with_every_bound_is_accepted(tmp_path):
    declare(tmp_path, COMPLETE_LOOKUP)

    tool = Tool.objects.get(name="pay")
    assert tool.lookup_proves_absence
    assert (tool.call_timeout, tool.lookup_horizon) == (timedelta(seconds=30), timedelta(days=30))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"call_timeout": None}, "lookup_proves_absence needs call_timeout"),
        ({"lookup_horizon": None}, "lookup_proves_absence needs lookup_horizon"),
        ({"settle_after": '"1m"'}, "settle_after must be at least call_timeout \\+ search_lag"),
        ({"preset": '"unsafe"'}, "lookup_proves_absence needs has_lookup"),
        ({"reconciler": '"manual"', "reconciler_config": None}, "the manual adapter cannot look"),
        (
            {
                "reconciler": '"http_lookup"',
                "reconciler_config": '{ url = "http://x.invalid/?r={idempotency_key}", '
                "single_object = true }",
            },
            "lookup_proves_absence: the http_lookup adapter, as configured, cannot prove absence",
        ),
        (
            {
                "reconciler": '"http_lookup"',
                "reconciler_config": '{ url = "http://x.invalid/?r={idempotency_key}", '
                "not_found_on_404 = true }",
            },
            "lookup_proves_absence: the http_lookup adapter, as configured, cannot prove absence",
        ),
        ({"call_timeout": '"2h"', "settle_after": '"3h"'}, "call_timeout must be at most 1h"),
    ],
)
def test_a_lookup_that_cannot_prove_absence_is_refused(tmp_path, changes, message):
    with pytest.raises(ToolFileError, match=message):
        declare(tmp_path, COMPLETE_LOOKUP, **changes)
    assert not Tool.objects.filter(name="pay").exists()


def test_statements_with_amount_paths_and_unit_are_accepted_with_a_default_skew(tmp_path):
    declare(
        tmp_path,
        STATEMENTS,
        statement_columns='{ provider_ref = "id" }',
        statement_status='{ paid = "succeeded" }',
    )

    tool = Tool.objects.get(name="pay")
    assert (tool.statements, tool.statement_skew) == (True, timedelta(minutes=5))
    assert tool.statement_columns == {"provider_ref": "id"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"amount_unit": None}, "must declare \\['amount_unit'\\]"),
        ({"amount_path": None, "currency_path": None}, "must declare"),
        ({"amount_unit": '"cents"'}, "amount_unit must be"),
        ({"statement_columns": '{ color = "c" }'}, "maps unknown columns \\['color'\\]"),
        ({"statement_status": '{ paid = "great" }'}, "statement_status maps onto"),
        ({"statement_reference": '"account"'}, "statement_reference must be one of"),
        ({"statements": "false", "fetch_statements": "true"}, "fetch_statements needs"),
        ({"fetch_statements": "true"}, "a reconciler that can fetch statements"),
    ],
)
def test_statements_without_what_matching_needs_are_refused(tmp_path, changes, message):
    with pytest.raises(ToolFileError, match=message):
        declare(tmp_path, STATEMENTS, **changes)


def test_minor_units_are_refused_together_with_limits_read_in_major_units(tmp_path):
    with pytest.raises(ToolFileError, match="need amount_unit major"):
        declare(tmp_path, STATEMENTS, amount_unit='"minor"', limit_amount_per_day='{ EUR = "100" }')
