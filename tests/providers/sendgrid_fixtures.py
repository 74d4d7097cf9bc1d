"""The SendGrid adapter's tests' fixtures (a plugin of their modules): the fake SendGrid started
as a real process, the email tool declared against it, and effects of that tool."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.providers.sendgrid import caller
from ledger.models import Effect, Tool
from ledger.policy import digests
from tests.providers.sendgrid_support import TOOL, declare, request


@pytest.fixture
def sendgrid(start_sandbox, monkeypatch):
    """The fake SendGrid, its key in the environment variable the tool names."""
    monkeypatch.setenv(caller.API_KEY_ENV, caller.API_KEY)
    return start_sandbox("sendgrid")


@pytest.fixture
def email_tool(sendgrid, tmp_path, tools) -> Tool:
    return declare(tmp_path, sendgrid.url)


@pytest.fixture
def make_email(make_effect):
    """An effect of the email tool in any state, with an email request."""

    def make(status: str = "unknown", **fields: Any) -> Effect:
        asked = fields.pop("request", None) or request()
        target = asked["to"]
        return make_effect(
            status,
            tool=TOOL,
            target=target,
            request=asked,
            request_hash=digests.request_hash(TOOL, target, asked),
            **fields,
        )

    return make
