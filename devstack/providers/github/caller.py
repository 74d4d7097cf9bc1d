"""What the crash test sends to the fake GitHub, through PyGithub (GitHub publishes no Python
SDK): one issue per claimed effect, its body carrying the effect's marker, since GitHub keeps
no idempotency key.

`send` answers with the outcome the worker reports: confirmed with the issue's `node_id` on a
201, failed on a refusal GitHub means as final (401, 404, 410, 422: nothing was opened), and
unknown for everything else (a lost answer, a timeout, a 5xx, a rate limit's 403 or 429 after
the body left). It speaks only HTTP and never imports Django: the marker's module is loaded
from its file, being standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

TOKEN_ENV = "GITHUB_TOKEN"
TOKEN = "ghp_fake0123456789"  # the fake's default token
OWNER, REPO = "acme", "support"
TIMEOUT = 2  # seconds: the tool's call_timeout
ROOT = Path(__file__).resolve().parents[3]
ENV = {TOKEN_ENV: TOKEN}  # the ledger's lookups read the token from here

# The crash test's tool for this provider, as a tools.toml table.
TOOL: dict[str, Any] = {
    "preset": "lookup",
    "description": "Open a GitHub issue (no idempotency keys; found by the marker in its body)",
    "reconciler": "github",
    "reconciler_config": {
        "base_url": "{provider_url}",
        "owner": OWNER,
        "repo": REPO,
        "token_env": TOKEN_ENV,
    },
    "webhook_provider": "github",
    "has_lookup": True,
    "lookup_proves_absence": True,
    "lookup_horizon": "30d",
    "call_timeout": "2s",
    "settle_after": "3s",
}


def marker_module() -> ModuleType:
    """`reconcilers.providers.github.marker`, loaded from its file without its package (whose
    other modules need Django): what an agent's code uses to mark its issues."""
    name = "effect_ledger_github_marker"
    if name not in sys.modules:
        path = ROOT / "reconcilers" / "providers" / "github" / "marker.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def client(provider_url: str, fault: str = "") -> Any:
    """PyGithub speaking to the fake, with `X-Sandbox-Fault` on its requests when asked."""
    from github import Auth, Github

    class Faulted(Auth.Token):
        def authentication(self, headers: dict) -> None:
            super().authentication(headers)
            if fault:
                headers["X-Sandbox-Fault"] = fault

    token = os.environ.get(TOKEN_ENV) or TOKEN
    return Github(
        base_url=provider_url,
        auth=Faulted(token),
        timeout=TIMEOUT,
        retry=None,  # a retried POST would open a second issue
        seconds_between_requests=None,
        seconds_between_writes=None,
        lazy=True,
    )


def request_for(workflow: dict[str, Any]) -> dict[str, Any]:
    """The issue a crash-test workflow opens."""
    return {"title": f"Incident {workflow['run_id']}", "body": f"Seen on {workflow['account']}."}


def warm(provider_url: str) -> None:
    """PyGithub and the marker loaded, a client built: what `send` needs, before forking."""
    marker_module()
    client(provider_url)


def send(provider_url: str, effect: dict[str, Any], request: dict[str, Any], fault: str) -> dict:
    """Open the effect's issue once; `fault` ("", "hang=1", "drop") is applied by the fake to
    this one call. Returns {"status", "provider_ref", "response"} for POST /outcome."""
    from github import GithubException

    marker = marker_module()
    try:
        body = marker.marked_body(request.get("body"), effect["idempotency_key"], effect["id"])
    except ValueError as exc:
        return {"status": "failed", "provider_ref": "", "response": {"error": str(exc)}}
    repo = client(provider_url, fault).get_repo(f"{OWNER}/{REPO}")
    try:
        issue = repo.create_issue(title=str(request.get("title") or "-"), body=body)
    except GithubException as exc:
        final = exc.status in (401, 404, 410, 422)
        return {
            "status": "failed" if final else "unknown",
            "provider_ref": "",
            "response": {"status": exc.status, "message": str(exc.message or "")[:300]},
        }
    except Exception as exc:
        # The request may have left: a lost answer is unknown, never failed.
        return {"status": "unknown", "provider_ref": "", "response": {"error": type(exc).__name__}}
    return {
        "status": "confirmed",
        "provider_ref": issue.node_id,
        "response": {"number": issue.number, "html_url": issue.html_url},
    }


def records(provider_url: str) -> dict[str, int]:
    """How many issues the fake holds per effect idempotency key (by their markers)."""
    marker = marker_module()
    answer = httpx.get(f"{provider_url}/_sandbox/transactions", timeout=10, trust_env=False)
    answer.raise_for_status()
    counts: dict[str, int] = {}
    for issue in answer.json()["data"]:
        for key in {tag.key for tag in marker.markers(issue.get("body"))}:
            counts[key] = counts.get(key, 0) + 1
    return counts
