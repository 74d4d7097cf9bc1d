"""The GitHub adapter's tests' fixtures: the fake GitHub as a real process with its token in
the environment, the crash test's tool declared against it, and effects of that tool."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.providers.github import caller
from ledger.models import Effect, Tool
from ledger.policy import digests
from tests.providers.github_support import REPO, TOOL, declare, request


@pytest.fixture
def github(start_sandbox, monkeypatch):
    """The fake GitHub, its token in the environment variable the tool names."""
    monkeypatch.setenv(caller.TOKEN_ENV, caller.TOKEN)
    return start_sandbox("github")


@pytest.fixture
def issue_tool(github, tmp_path, tools) -> Tool:
    return declare(tmp_path, github.url)


@pytest.fixture
def make_issue(make_effect):
    """An effect of the issue tool in any state, with an issue request."""

    def make(status: str = "unknown", **fields: Any) -> Effect:
        asked = fields.pop("request", None) or request()
        return make_effect(
            status,
            tool=TOOL,
            target=REPO,
            request=asked,
            request_hash=digests.request_hash(TOOL, REPO, asked),
            **fields,
        )

    return make
