"""Alerts about a team's things go to the team's own channels when it has any, the rest to the
global ones (reviews.alerts.routing, ADR 0014), with the same at-least-once delivery and
Idempotency-Key; a failing team channel is that alert's failure only. Real HTTP receivers on
loopback and Django's mail outbox."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ledger.models import Agent, Alert, Team, Tool
from ledger.rules import outbox
from reviews.alerts.sender import send_due
from tests.test_alerts import SECRET, Receiver, verify


def _serving(statuses: list[int]) -> Iterator[Receiver]:
    receiver = Receiver(statuses)
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def global_hook(settings) -> Iterator[Receiver]:
    for receiver in _serving([]):
        settings.LEDGER_ALERT_WEBHOOK_URL = receiver.url
        settings.LEDGER_ALERT_WEBHOOK_SECRET = SECRET
        settings.LEDGER_ALERT_WEBHOOK_FORMAT = "json"
        yield receiver


@pytest.fixture
def team_hook() -> Iterator[Receiver]:
    yield from _serving([])


@pytest.fixture
def payments(alice, tools, team_hook) -> Team:
    """Payments owns alice and charge_card, and has its own webhook; support owns send_email and
    has no channel."""
    team = Team.objects.create(name="Payments", slug="payments", alert_webhook_url=team_hook.url)
    Agent.objects.filter(name="alice").update(team=team)
    Tool.objects.filter(name="charge_card").update(team=team)
    support = Team.objects.create(name="Support", slug="support")
    Tool.objects.filter(name="send_email").update(team=support)
    return team


def sent_to(receiver: Receiver) -> list[str]:
    return receiver.keys()


def alert(key: str) -> Alert:
    return Alert.objects.get(key=key)


def test_an_alert_about_a_teams_effect_goes_to_its_channel_only(
    payments, make_effect, team_hook, global_hook
):
    effect = make_effect("unknown", tool="charge_card")
    outbox.notify("review_overdue", "1", {"summary": "overdue", "effect_id": str(effect.id)})

    assert send_due() == {"sent": 1, "failed": 0}

    [(headers, body)] = team_hook.received
    verify(headers, body)  # signed as the global webhook is
    assert headers["Idempotency-Key"] == str(alert("1").id)
    assert global_hook.received == []
    assert alert("1").delivered == ["team:payments:webhook"]


def test_alerts_about_teams_without_channels_and_global_ones_go_to_the_global_channels(
    payments, make_effect, bob, team_hook, global_hook
):
    theirs = make_effect("unknown", agent=bob.agent, tool="send_email")
    outbox.notify("review_overdue", "support", {"effect_id": str(theirs.id)})
    outbox.notify("halt", "everything", {"scope": "all", "value": ""})
    outbox.notify("restore", "window", {"window": 1})

    assert send_due() == {"sent": 3, "failed": 0}

    assert sorted(global_hook.keys()) == sorted(
        str(alert(k).id) for k in ("support", "everything", "window")
    )
    assert team_hook.received == []


def test_halts_limits_and_statements_of_a_teams_tool_go_to_the_team(
    payments, team_hook, global_hook
):
    outbox.notify("halt", "h", {"scope": "tool", "value": "charge_card"})
    which = {"which": "tool:charge_card:claims_per_minute", "current": 6, "max": 5}
    outbox.notify("limit_exceeded", "l", {"limit": which})
    outbox.notify("incident_opened", "i", {"tool": "charge_card", "incident": 1})
    outbox.notify("halt", "a", {"scope": "agent", "value": "alice"})

    assert send_due() == {"sent": 4, "failed": 0}

    assert sorted(team_hook.keys()) == sorted(str(alert(k).id) for k in "hlia")
    assert global_hook.received == []


def test_a_teams_email_channel_takes_its_alerts(payments, make_effect, settings, mailoutbox):
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    payments.alert_webhook_url = ""
    payments.alert_email = "payments-oncall@example.com"
    payments.save()
    effect = make_effect("unknown", tool="charge_card")
    outbox.notify("review_overdue", "1", {"effect_id": str(effect.id)})
    outbox.notify("halt", "2", {"scope": "all", "value": ""})

    send_due()

    assert sorted(m.to[0] for m in mailoutbox) == [
        "ops@example.com",
        "payments-oncall@example.com",
    ]


def test_a_failing_team_channel_stops_no_other_alert_and_is_retried_with_the_same_key(
    payments, make_effect, bob, global_hook, team_hook
):
    team_hook.statuses = [500]  # the team's receiver fails once
    ours = make_effect("unknown", tool="charge_card")
    theirs = make_effect("unknown", agent=bob.agent, tool="send_email")
    outbox.notify("review_overdue", "ours", {"effect_id": str(ours.id)})
    outbox.notify("review_overdue", "theirs", {"effect_id": str(theirs.id)})
    outbox.notify("halt", "global", {"scope": "all", "value": ""})

    assert send_due() == {"sent": 2, "failed": 1}
    assert sorted(global_hook.keys()) == sorted(str(alert(k).id) for k in ("theirs", "global"))
    failed = alert("ours")
    assert failed.sent_at is None and "500" in failed.last_error

    Alert.objects.filter(pk=failed.pk).update(leased_until=None)  # its backoff over
    send_due()
    assert team_hook.keys() == [str(failed.id), str(failed.id)]  # the same key both times
    assert alert("ours").sent_at is not None
