"""The fake Slack with its interactivity Request URL at the live ledger, and the ledger's alerts
and calls to Slack pointed at it (`tests.slack_interactive` drives it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slack_interactive import DOOR, SECRET, TOKEN, FakeSlack


@pytest.fixture
def slack(start_sandbox, live_server, settings) -> Iterator[FakeSlack]:
    """The fake Slack with its interactivity Request URL at the live ledger, and the ledger's
    alerts and Slack calls pointed at it."""
    process = start_sandbox(
        "slack",
        "--bot-token", TOKEN,
        "--signing-secret", SECRET,
        "--interactivity-url", live_server.url + DOOR,
    )  # fmt: skip
    settings.LEDGER_SLACK_SIGNING_SECRET = SECRET
    settings.LEDGER_SLACK_OLD_SIGNING_SECRET = ""
    settings.LEDGER_SLACK_BOT_TOKEN = TOKEN
    settings.LEDGER_SLACK_API_URL = process.url + "/api/"
    settings.LEDGER_SLACK_RESPONSE_URL = process.url + "/actions/"
    settings.LEDGER_SLACK_EMAIL_TRUSTED_TEAMS = []
    settings.LEDGER_ALERT_WEBHOOK_URL = process.url + "/services/T0FAKETEAM/B0ALERTS/hook"
    settings.LEDGER_ALERT_WEBHOOK_FORMAT = "slack"
    settings.LEDGER_ALERT_EMAILS = []
    settings.LEDGER_ALERT_LINK_BASE = live_server.url
    fake = FakeSlack(process, live_server.url)
    yield fake
    fake.http.close()
