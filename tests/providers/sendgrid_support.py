"""What the SendGrid adapter's tests share: the crash test's tool declared through loadtools
pointing at the fake SendGrid, and emails sent to it through the `sendgrid` library
(`devstack.providers.sendgrid.caller`). Their fixtures: `sendgrid_fixtures`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devstack.providers.sendgrid import caller
from ledger.models import Effect, Tool
from tests.providers import tooling

TOOL = "send_email_sg"


def declare(directory: Path, url: str, **changes: Any) -> Tool:
    """The caller's tool table, its base URL the fake's, declared as loadtools does."""
    return tooling.declare(directory, caller, url, TOOL, **changes)


def request(to: str = "ada@example.com", subject: str = "Your receipt") -> dict[str, str]:
    return {"to": to, "subject": subject, "text": "Thank you."}


def sent(sendgrid, effect: Effect, fault: str = "", **asked: Any) -> dict[str, Any]:
    """The effect's email sent to the fake through the library, as the worker sends it."""
    labels = {"idempotency_key": effect.idempotency_key, "id": str(effect.id)}
    return caller.send(sendgrid.url, labels, asked or dict(effect.request), fault)
