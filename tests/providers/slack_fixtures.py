"""The Slack adapter's tests' fixtures: the fake Slack, the tool declared against it, and
effects of that tool (`slack_support` holds the helpers)."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.providers.slack import caller
from ledger.models import Effect, Tool
from ledger.policy import digests
from tests.providers.slack_support import TOOL, declare, fake_args


@pytest.fixture
def slack(start_sandbox, monkeypatch):
    """The fake Slack, its bot token in the environment variable the tool names."""
    monkeypatch.setenv(caller.TOKEN_ENV, caller.TOKEN)
    return start_sandbox("slack", *fake_args())


@pytest.fixture
def slack_tool(slack, tmp_path, tools) -> Tool:
    return declare(tmp_path, slack.url)


@pytest.fixture
def make_message(make_effect):
    """An effect of the Slack tool in any state, with a message request."""

    def make(status: str = "unknown", **fields: Any) -> Effect:
        asked = fields.pop("request", None) or {"text": "Deploy finished."}
        return make_effect(
            status,
            tool=TOOL,
            target=caller.CHANNEL,
            request=asked,
            request_hash=digests.request_hash(TOOL, caller.CHANNEL, asked),
            **fields,
        )

    return make
