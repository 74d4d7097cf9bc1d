"""The guarded MCP proxy of the crash matrix (tests/adapters/test_mcp_crashes.py), as a process
that SIGKILLs itself around the relayed charge.

    python tests/adapters/agents/mcp_crash_proxy.py PORT UPSTREAM_URL

Serves Streamable HTTP on 127.0.0.1:PORT/mcp in front of UPSTREAM_URL (`mcp_upstream.py`),
guarded as docs/frameworks/mcp.md shows (`guarded_proxy`, the repository's tools.toml,
`charge_card` targeting its `account`). A middleware inside the guard dies, with probability
MCP_KILL_P at each place (`crash_points`): once the guard has claimed the effect and before the
call is relayed, while the upstream is charging, and after the upstream answered, before the
guard records the outcome. Each kill prints `KILL <place>`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from ledger_client.adapters.mcp import ToolRoute, guarded_proxy

from tests.adapters.agents import crash_points

ROOT = Path(__file__).resolve().parents[3]
KILL_P = float(os.environ.get("MCP_KILL_P", "0"))


class CrashPoints(Middleware):
    """Added after the guard, so it runs inside it: around the relay of each tool call."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        crash_points.maybe_die("before-send", KILL_P)
        timer = crash_points.in_flight(KILL_P)
        result = await call_next(context)
        if timer is not None:
            timer.cancel()
        crash_points.maybe_die("after-answer", KILL_P)
        return result


def main(port: str, upstream: str) -> None:
    proxy = guarded_proxy(
        upstream,
        # The corner's own declarations (its call_timeout bounds the relay), else the
        # repository's.
        tools_toml=os.environ.get("CRASH_TOOLS_TOML") or ROOT / "tools.toml",
        routes={"charge_card": ToolRoute(target="{account}")},
    )
    proxy.add_middleware(CrashPoints())
    proxy.run("http", show_banner=False, host="127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    main(*sys.argv[1:3])
