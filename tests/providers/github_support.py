"""What the GitHub adapter's tests share: the fake GitHub started as a real process, the crash
test's tool declared through loadtools pointing at it, and issues opened in it through PyGithub
(`devstack.providers.github.caller`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devstack.providers.github import caller
from ledger.models import Effect, Tool
from tests.providers import tooling

TOOL = "open_issue_gh"
REPO = f"{caller.OWNER}/{caller.REPO}"


def declare(directory: Path, url: str, **changes: Any) -> Tool:
    """The caller's tool table, its base URL the fake's, declared as loadtools does."""
    return tooling.declare(directory, caller, url, TOOL, **changes)


def request(title: str = "Printer on fire", body: str = "Third floor.") -> dict[str, str]:
    return {"title": title, "body": body}


def opened(github, effect: Effect, fault: str = "", **asked: Any) -> dict[str, Any]:
    """The effect's issue opened in the fake through PyGithub, as the worker opens it."""
    identity = {"idempotency_key": effect.idempotency_key, "id": str(effect.id)}
    return caller.send(github.url, identity, {**effect.request, **asked}, fault)


def seed(
    github, title: str, body: str | None, created: float, pull: bool = False, copies: int = 1
) -> dict:
    """Issues (or pull requests) written into the fake as if opened at `created`."""
    answer = github.http.post(
        "/_sandbox/seed",
        json={
            "repo": REPO,
            "title": title,
            "body": body,
            "created": created,
            "pull_request": pull,
            "copies": copies,
        },
    )
    assert answer.status_code == 201, answer.text
    return answer.json()
