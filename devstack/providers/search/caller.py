"""The crash test's caller for the records provider: a record created per effect, its
reference the effect's idempotency key, found again by the generic `http_lookup`."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import httpx

from devstack.providers.search.fake import TOKEN

ENV = {"CRASH_SEARCH_TOKEN": TOKEN}
TOOL: dict[str, Any] = {
    "preset": "lookup",
    "call_timeout": "2s",
    "search_lag": "0s",
    "settle_after": "3s",
    "lookup_proves_absence": True,
    "lookup_horizon": "1h",
    "reconciler": "http_lookup",
    "reconciler_config": {
        "url": "{provider_url}/search?reference={idempotency_key}&paging=link",
        "records": "data",
        "key": "reference",
        "status": "state",
        "confirmed": ["open"],
        "paging": "link",
        "auth": "bearer",
        "token_env": "CRASH_SEARCH_TOKEN",
        "timeout": 3,
    },
}


def request_for(workflow: dict[str, Any]) -> dict[str, Any]:
    return {"title": f"order {workflow['run_id']}", "account": workflow["account"]}


@functools.cache
def client() -> httpx.Client:
    """One client per process: building one costs a TLS context (a third of a second on a
    loaded machine), which a call in flight should not wait for."""
    return httpx.Client(timeout=2.0, trust_env=False)


def warm(provider_url: str) -> None:
    """The client built before forking: an agent forked afterwards calls at once."""
    client()


def send(provider_url: str, effect: dict[str, Any], request: dict[str, Any], fault: str) -> dict:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if fault:
        headers["X-Sandbox-Fault"] = fault
    try:
        reply = client().post(
            f"{provider_url}/records",
            json={"reference": effect["idempotency_key"], "state": "open"},
            headers=headers,
        )
    except httpx.HTTPError as exc:
        return {"status": "unknown", "error": {"detail": type(exc).__name__}}
    if reply.status_code == 201:
        record = reply.json()
        return {"status": "confirmed", "provider_ref": record["id"], "response": record}
    status = "unknown" if reply.status_code >= 500 else "failed"
    return {"status": status, "error": {"status": reply.status_code}}


def records(provider_url: str) -> dict[str, int]:
    listed = httpx.get(f"{provider_url}/_sandbox/transactions", trust_env=False).json()
    rows = listed.get("data", listed) if isinstance(listed, dict) else listed
    return dict(Counter(row["reference"] for row in rows))
