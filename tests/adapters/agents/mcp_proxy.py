"""The guarded MCP proxy as a process of its own, so that a test can SIGKILL it mid-call.

    python tests/adapters/agents/mcp_proxy.py PORT UPSTREAM_URL [--key-argument TOOL=ARG]
        [--in-flight-wait SECONDS]

Serves Streamable HTTP on 127.0.0.1:PORT/mcp in front of UPSTREAM_URL, with the repository's
tools.toml as the tool declarations and the ledger from EFFECT_LEDGER_URL / _API_KEY / _OWNER.
"""

import argparse
from dataclasses import replace
from pathlib import Path

from ledger_client.adapters.mcp import ToolRoute, guarded_proxy

ROOT = Path(__file__).resolve().parents[3]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("upstream")
    parser.add_argument("--key-argument", action="append", default=[])
    parser.add_argument("--in-flight-wait", type=float, default=5.0)
    args = parser.parse_args()
    # The effect's target is what the provider acts on: the ledger's lookups compare it.
    routes = {"charge_card": ToolRoute(target="{account}"), "send_email": ToolRoute(target="{to}")}
    for pair in args.key_argument:
        tool, argument = pair.split("=", 1)
        routes[tool] = replace(routes[tool], key_argument=argument)
    proxy = guarded_proxy(
        args.upstream,
        tools_toml=ROOT / "tools.toml",
        routes=routes,
        in_flight_wait=args.in_flight_wait,
    )
    proxy.run("http", show_banner=False, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
