"""What the MCP proxy reads of the tool declarations: read-only tools, business keys, and the
declared call_timeout that bounds how long it waits for the upstream."""

from __future__ import annotations

import pytest
from ledger_client.adapters.mcp import LedgerGuard, load_tool_policies


def declare(tmp_path, text: str):
    path = tmp_path / "tools.toml"
    path.write_text(text)
    return load_tool_policies(path)


def test_a_declared_call_timeout_bounds_the_relay(tmp_path):
    policies = declare(
        tmp_path,
        '[tools.pay]\ncall_timeout = "2s"\n[tools.slow]\ncall_timeout = "1h30m"\n[tools.free]\n',
    )
    guard = LedgerGuard(policies, call_timeout=120.0)

    assert (policies["pay"].call_timeout, policies["slow"].call_timeout) == (2.0, 5400.0)
    assert guard._timeout("pay") == 2.0
    assert guard._timeout("slow") == 120.0
    assert guard._timeout("free") == 120.0
    assert LedgerGuard(policies, call_timeout=None)._timeout("pay") == 2.0


@pytest.mark.parametrize("value", ['"2 s"', '"soon"', "30", '"30s5"'])
def test_a_call_timeout_that_is_not_a_duration_is_refused(tmp_path, value):
    with pytest.raises(ValueError, match="call_timeout must be a duration"):
        declare(tmp_path, f"[tools.pay]\ncall_timeout = {value}\n")
