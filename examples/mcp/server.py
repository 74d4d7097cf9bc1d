"""The MCP server the example puts the guarded proxy in front of: tools that pay and message
through the sandbox providers. It knows nothing of the ledger; it only passes on the
idempotency key the proxy puts in each guarded request's `_meta`.

    SANDBOX_PAYMENTS_URL=... SANDBOX_MESSAGING_URL=... python examples/mcp/server.py   (stdio)

Written against fastmcp 4.2.3.
"""

import os
import sys
from pathlib import Path
from typing import Any

import httpx
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.context import Context
from mcp_types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stripe_payments import charge_async

server = FastMCP("shop-tools")


def _key(ctx: Context) -> str | None:
    request = ctx.request_context
    key = (request.meta or {}).get("effectledger/idempotency_key") if request else None
    return key if isinstance(key, str) else None


async def _post(url: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        reply = await http.post(url, json=body, headers=headers)
    if reply.status_code >= 400:
        raise ToolError(f"the provider answered {reply.status_code}: {reply.text[:300]}")
    answer: dict[str, Any] = reply.json()
    return answer


@server.tool
async def charge_card(amount: str, currency: str, account: str, ctx: Context) -> dict[str, Any]:
    """Charge the customer's card. `amount` in major units, such as "25.00"."""
    key = _key(ctx)
    if key is None:
        # Only the guarding proxy's calls carry a key: an unguarded payment is refused.
        raise ToolError("charge_card is paid only under an effect's idempotency key")
    return await charge_async(amount, currency, account, key)


@server.tool
async def send_email(to: str, subject: str, body: str, ctx: Context) -> dict[str, Any]:
    """Email the customer."""
    # The messaging provider ignores keys; the header only lets the example count its own.
    message = {"to": to, "subject": subject, "body": body}
    return await _post(f"{os.environ['SANDBOX_MESSAGING_URL']}/messages", message, _key(ctx))


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def get_balance() -> dict[str, Any]:
    """The payments balance."""
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        reply = await http.get(f"{os.environ['SANDBOX_PAYMENTS_URL']}/balance")
    reply.raise_for_status()
    balance: dict[str, Any] = reply.json()
    return balance


if __name__ == "__main__":
    server.run("stdio", show_banner=False, log_level="WARNING")
