"""An MCP client that pays and sends a receipt through a guarded MCP proxy.

The upstream MCP server (`server.py`, started over stdio) has tools that charge the payments
sandbox and send a message through the messaging sandbox, and knows nothing of the ledger.
The proxy in front of it (`ledger_client.adapters.mcp.guarded_proxy`) records every call of a
tool that is not read-only in the ledger before relaying it, and passes the effect's
idempotency key upstream. The scripted client (no model, no API key: offline) names each call
in its request's `_meta`, pays, sends the receipt, then sends both calls again as a client does
after a lost response: they are answered from the ledger, and nothing happens twice. It ends
by counting what the providers did against what the ledger recorded, and exits non-zero if
they differ.

    EFFECT_LEDGER_URL=... EFFECT_LEDGER_API_KEY=... \\
    SANDBOX_PAYMENTS_URL=... SANDBOX_MESSAGING_URL=... python examples/mcp/agent.py

Written against fastmcp 4.2.3 (mcp 2.3.0).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from ledger_client.adapters.mcp import (
    META_CALL_ID,
    META_REPLAYED,
    META_RUN_ID,
    ToolRoute,
    guarded_proxy,
)

# The closing check every example shares (examples/ledger_counts.py, beside this directory).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ledger_counts import counts_agree

HERE = Path(__file__).resolve().parent
# The tool declarations the ledger was given (`manage.py loadtools tools.toml`).
TOOLS_TOML = Path(os.environ.get("EFFECT_LEDGER_TOOLS", HERE.parent.parent / "tools.toml"))
# The effect's target is what the provider acts on (the ledger's lookups compare it).
ROUTES = {"charge_card": ToolRoute(target="{account}"), "send_email": ToolRoute(target="{to}")}


async def shop(run_id: str) -> list[Any]:
    """The scripted client: pay, send the receipt, then both again (a retry after a lost
    response, with the same `_meta` identity). Returns the four results."""
    upstream = StdioTransport(sys.executable, [str(HERE / "server.py")], env=dict(os.environ))
    proxy = guarded_proxy(upstream, tools_toml=TOOLS_TOML, routes=ROUTES, name="guarded-shop")
    charge = {"amount": "25.00", "currency": "EUR", "account": "acct_42"}
    results = []
    async with Client(proxy) as client:
        balance = await client.call_tool("get_balance", {})  # read-only: relayed unguarded
        print(f"balance before: {balance.structured_content['available']}")
        for attempt in ("first", "retry"):
            paid = await client.call_tool(
                "charge_card", charge, meta={META_RUN_ID: run_id, META_CALL_ID: "call_charge"}
            )
            receipt = {
                "to": "customer@example.com",
                "subject": "Your receipt",
                "body": f"We charged 25.00 EUR (charge {paid.structured_content['id']}).",
            }
            sent = await client.call_tool(
                "send_email", receipt, meta={META_RUN_ID: run_id, META_CALL_ID: "call_mail"}
            )
            replayed = [bool((r.meta or {}).get(META_REPLAYED)) for r in (paid, sent)]
            print(f"{attempt}: charge {paid.structured_content['id']}, replayed {replayed}")
            results += [paid, sent]
    return results


def main() -> int:
    run_id = f"example-mcp-{uuid.uuid4().hex[:12]}"
    results = asyncio.run(shop(run_id))
    replays = [bool((r.meta or {}).get(META_REPLAYED)) for r in results]
    ok = replays == [False, False, True, True]

    ok = ok and counts_agree(run_id)
    print(json.dumps({"run_id": run_id, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # an example's failure is a non-zero exit, with the reason
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
