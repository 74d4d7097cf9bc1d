"""The MCP server the MCP proxy tests put the guard in front of: real tools on the sandboxes.

    python tests/adapters/agents/mcp_upstream.py [--http PORT]     (stdio without --http)

Tools (the names tools.toml declares): `charge_card` charges the payments sandbox (and
`charge_in_euros` too, with a `currency` that defaults to "EUR": a test routes it to the
ledger's `charge_card`),
`send_email` sends a message through the messaging sandbox, `get_balance` reads the payments
balance. Their hints lie on purpose: `send_email` claims to be read-only and `get_balance`
claims to be destructive, so a test can show that the proxy goes by tools.toml alone.

The idempotency key a call carries comes from its `idempotency_key` argument (when the proxy
injects it there) or from the request's `_meta["effectledger/idempotency_key"]`.

Environment:
- SANDBOX_PAYMENTS_URL, SANDBOX_MESSAGING_URL: the providers.
- MCP_UPSTREAM_LOG: a file that gets one JSON line per tool invocation (so a test counts how
  often a call reached this server).
- MCP_UPSTREAM_CONTROL: a JSON file read at each charge, optional: `{"hang_after_charge":
  PATH}` writes PATH once the provider answered and then never returns (a test SIGKILLs the
  proxy meanwhile); `{"delay_after_charge": SECONDS}` answers that much later.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.context import Context
from mcp_types import ToolAnnotations

KEY_META = "effectledger/idempotency_key"

server = FastMCP("sandbox-tools", instructions="Pays and messages through the sandboxes.")


def _log(tool: str, arguments: dict[str, Any], key: str | None) -> None:
    path = os.environ.get("MCP_UPSTREAM_LOG")
    if path:
        line = json.dumps({"tool": tool, "arguments": arguments, "key": key, "at": time.time()})
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")


def _control() -> dict[str, Any]:
    path = os.environ.get("MCP_UPSTREAM_CONTROL")
    if not path or not Path(path).exists():
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8") or "{}")
    return data if isinstance(data, dict) else {}


def _meta_key(ctx: Context) -> str | None:
    request = ctx.request_context
    value = (request.meta or {}).get(KEY_META) if request is not None else None
    return value if isinstance(value, str) else None


async def _post(base: str, path: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        response = await http.post(f"{base}{path}", json=body, headers=headers)
    if response.status_code >= 400:
        raise ToolError(f"provider answered {response.status_code}: {response.text[:300]}")
    data = response.json()
    assert isinstance(data, dict)
    return data


@server.tool
async def charge_card(
    amount: str,
    currency: str,
    account: str,
    ctx: Context,
    order_id: str | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Charge a card at the payments provider. `amount` is a decimal string such as "25.00"."""
    key = idempotency_key or _meta_key(ctx)
    body: dict[str, Any] = {"amount": amount, "currency": currency, "account": account}
    if order_id is not None:
        body["metadata"] = {"order_id": order_id}
    _log("charge_card", body, key)
    charge = await _post(os.environ["SANDBOX_PAYMENTS_URL"], "/charges", body, key)
    control = _control()
    if control.get("hang_after_charge"):
        Path(control["hang_after_charge"]).write_text(json.dumps(charge), encoding="utf-8")
        await anyio.sleep(3600)
    if control.get("delay_after_charge"):
        await anyio.sleep(float(control["delay_after_charge"]))
    return charge


@server.tool
async def charge_in_euros(
    amount: str,
    account: str,
    ctx: Context,
    currency: str = "EUR",
    note: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Charge a card; the currency defaults to euros (its input schema says so)."""
    key = idempotency_key or _meta_key(ctx)
    body: dict[str, Any] = {"amount": amount, "currency": currency, "account": account}
    _log("charge_in_euros", {**body, "note": note}, key)
    return await _post(os.environ["SANDBOX_PAYMENTS_URL"], "/charges", body, key)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
async def send_email(to: str, subject: str, body: str, ctx: Context) -> dict[str, Any]:
    """Send a message. (Its readOnlyHint is a lie: it sends a message every time.)"""
    key = _meta_key(ctx)
    _log("send_email", {"to": to, "subject": subject, "body": body}, key)
    message = {"to": to, "subject": subject, "body": body}
    return await _post(os.environ["SANDBOX_MESSAGING_URL"], "/messages", message, key)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
async def get_balance(ctx: Context) -> dict[str, Any]:
    """Read the payments balance. (Its destructiveHint is a lie: it only reads.)"""
    _log("get_balance", {}, _meta_key(ctx))
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        response = await http.get(f"{os.environ['SANDBOX_PAYMENTS_URL']}/balance")
    response.raise_for_status()
    data = response.json()
    assert isinstance(data, dict)
    return data


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("http", show_banner=False, host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio", show_banner=False)
