"""What the Slack adapter's tests share: the fake's command line, the crash test's tool
declared through loadtools against it, and messages posted to it through `slack_sdk`
(`devstack.providers.slack.caller`). The fixtures are in `slack_fixtures`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devstack.providers.slack import caller
from ledger.models import Effect, Tool
from tests.providers import tooling

TOOL = "notify_slack"
OTHER_CHANNEL = "C0OTHER001"
SIGNING_SECRET = "slack-signing-secret-0123456789abcdef"


def declare(directory: Path, url: str, **changes: Any) -> Tool:
    """The caller's tool table, its base URL the fake's, declared as loadtools does; a change
    to None leaves the key out."""
    return tooling.declare(directory, caller, url, TOOL, **changes)


def fake_args(*extra: str) -> tuple[str, ...]:
    return (
        "--bot-token",
        caller.TOKEN,
        "--channels",
        f"{caller.CHANNEL},{OTHER_CHANNEL}",
        "--declared-metadata",
        caller.EVENT_TYPE,
        *extra,
    )


def post(slack, effect: Effect, fault: str = "", *, as_effect: str = "", **asked: Any) -> dict:
    """The effect's message posted to the fake through the SDK, as the worker posts it
    (`as_effect`: another effect id in the metadata, under the same key)."""
    labels = {"idempotency_key": effect.idempotency_key, "id": as_effect or str(effect.id)}
    return caller.send(slack.url, labels, asked or dict(effect.request), fault)


def rate_limit(slack, count: int, retry_after: int = 30, after: int = 0) -> None:
    answer = slack.http.post(
        "/_sandbox/ratelimit",
        json={"count": count, "retry_after": retry_after, "after": after},
    )
    answer.raise_for_status()
