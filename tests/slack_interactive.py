"""What the tests of deciding from Slack share: the fake Slack driven as a person would (a real
process on loopback, its interactive side pointed at the ledger's live server; the fixture is
in `slack_app`), people linked to Slack users, and an alert about an effect sent to the fake's
incoming webhook.

Every press and submission reaches the ledger as Slack sends it: a form-encoded payload in
Slack's documented shape, signed by the fake with the app's signing secret, over HTTP; every
call back (views.open, users.info, response_url) reaches the fake over HTTP.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

import httpx
from django.contrib.auth.models import User
from django.db import connection

from ledger.models import Effect, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.alerts.due import sweep
from reviews.alerts.sender import send_due
from reviews.models import SlackIdentity

SECRET = "slack-app-signing-secret-0123456789"
TOKEN = "xoxb-fake-slack-bot-token"
TEAM = "T0FAKETEAM"
DOOR = "/slack/interactions"


def slack_signature(secret: str, timestamp: int, body: bytes) -> str:
    """Slack's v0 signature, computed as Slack documents it."""
    base = f"v0:{timestamp}:".encode() + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class FakeSlack:
    """The fake Slack process, driven as a person in Slack would."""

    def __init__(self, process: Any, ledger_url: str) -> None:
        self.process = process
        self.url = process.url
        self.ledger_url = ledger_url
        self.http = httpx.Client(base_url=process.url, timeout=30, trust_env=False)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(path, json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def press(self, action: str, user: str, *, team: str = TEAM, **more: Any) -> dict[str, Any]:
        """`user` presses the button of `action` ("confirm" → "decide:confirm") in the last
        message; what the ledger answered."""
        body = {"action_id": f"decide:{action}", "user": user, "team": team, **more}
        return self._post("/_sandbox/press", body)

    def submit(self, values: dict[str, Any], user: str, *, team: str = TEAM) -> dict[str, Any]:
        return self._post("/_sandbox/submit", {"values": values, "user": user, "team": team})

    def replay(self, request: int = -1) -> dict[str, Any]:
        return self._post("/_sandbox/replay", {"request": request})

    def add_user(self, user: str, email: str, **more: Any) -> None:
        self._post("/_sandbox/users", {"id": user, "email": email, **more})

    def state(self) -> dict[str, Any]:
        response = self.http.get("/_sandbox/interactive")
        response.raise_for_status()
        return response.json()

    def message(self, index: int = -1) -> dict[str, Any]:
        return self.state()["messages"][index]

    def ephemeral(self) -> list[str]:
        """What the ledger told pressers alone, in order."""
        return [
            r["body"]["text"]
            for r in self.state()["responses"]
            if r["body"].get("response_type") == "ephemeral"
        ]

    def signed_post(self, body: bytes, *, at: int | None = None, secret: str = SECRET):
        """A request to the ledger's door signed here, as Slack signs (for bodies Slack would
        never send)."""
        stamp = int(time.time()) if at is None else at
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": str(stamp),
            "X-Slack-Signature": slack_signature(secret, stamp, body),
        }
        with httpx.Client(timeout=30, trust_env=False) as client:
            return client.post(self.ledger_url + DOOR, content=body, headers=headers)


def link_slack(user: User, slack_user: str, team: str = TEAM) -> SlackIdentity:
    return SlackIdentity.objects.create(
        team_id=team, slack_user=slack_user, user=user, linked_by="test"
    )


def alert_on(effect: Effect, reason: str = "reconciliation_inconclusive") -> ReviewItem:
    """The effect's review item (opened for `reason` unless one is open), overdue, and its
    alert sent to the configured channels (the fake Slack's webhook, an email)."""
    open_review(effect.id, reason)
    item = ReviewItem.objects.get(effect=effect, resolved_at__isnull=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reviews_reviewitem SET opened_at = now() - interval '25 hours',"
            " due_at = now() - interval '1 hour' WHERE id = %s",
            [item.id],
        )
    assert sweep() >= 1
    assert send_due() == {"sent": 1, "failed": 0}
    return item
