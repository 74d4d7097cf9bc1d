"""No alert can block the others: whatever fails delivering one row is a failed attempt of that
row, and the sender goes on. And what agents chose reaches people as text: one line in an
email subject, escaped in Slack. Real PostgreSQL, real HTTP endpoints on loopback, Django's
locmem mail backend."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from ledger.models import Alert, Effect
from ledger.rules import outbox
from ledger.rules.reviewqueue import open_review
from reviews.alerts.due import sweep
from reviews.alerts.sender import CALLBACK_ATTEMPTS, send_due
from tests.receivers import Endpoint

SECRET = "alert-and-callback-secret-0123456789"


@pytest.fixture
def endpoint(settings) -> Iterator[Endpoint]:
    """One endpoint for both: operators' JSON webhook at /alerts, agents' callbacks at /cb."""
    endpoint = Endpoint()
    settings.LEDGER_CALLBACK_ALLOW = [endpoint.origin]
    settings.LEDGER_CALLBACK_SECRET = SECRET
    settings.LEDGER_ALERT_WEBHOOK_URL = f"{endpoint.origin}/alerts"
    settings.LEDGER_ALERT_WEBHOOK_SECRET = SECRET
    settings.LEDGER_ALERT_WEBHOOK_FORMAT = "json"
    yield endpoint
    endpoint.close()


def insert_old_row(kind: str, payload: str, *, delivered: str = "[]", minutes: int = 1) -> str:
    """A row as an older version could have stored it, older than everything behind it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_alert (id, kind, key, payload, created_at, attempts, delivered, "
            "last_error) VALUES (gen_random_uuid(), %s, gen_random_uuid()::text, %s::jsonb, "
            "now() - make_interval(mins => %s), 0, %s::jsonb, '') RETURNING id",
            [kind, payload, minutes, delivered],
        )
        return str(cursor.fetchone()[0])


def paths(endpoint: Endpoint) -> list[str]:
    return sorted(request.path for request in endpoint.received)


def assert_backing_off(alert_id: str, *, says: str) -> Alert:
    alert = Alert.objects.get(pk=alert_id)
    assert alert.sent_at is None
    assert alert.attempts == 1
    assert says in alert.last_error, alert.last_error
    assert "\r" not in alert.last_error and "\n" not in alert.last_error
    assert alert.leased_until > timezone.now() + timedelta(seconds=20)  # the 30 s backoff
    return alert


# --- A poisoned row holds nothing up ---------------------------------------------------------


@pytest.mark.parametrize(
    "stored",
    [
        "{origin}/cb\r\nX-Injected: 1",
        "{origin}/cb\tx",
        "{origin}/cb\x7f",
        "{origin}/cb\x01",
        "\x01{origin}/cb",
        "http://127.0.0.1:1/cb",  # an allowed host, once; another port
        "http://169.254.169.254/latest/meta-data/",
        12,
        None,
    ],
)
def test_a_poisoned_callback_is_a_failed_attempt_and_the_halt_and_good_callback_behind_go_out(
    alice, endpoint, stored
):
    url = stored.format(origin=endpoint.origin) if isinstance(stored, str) else stored
    poisoned = insert_old_row("callback", json.dumps({"callback_url": url, "status": "x"}))
    outbox.notify("halt", "halt:1", {"summary": "tool charge_card halted"})
    effect = alice.intent(callback_url=f"{endpoint.origin}/cb")
    alice.claim(effect["id"])

    assert send_due(budget=10) == {"sent": 2, "failed": 1}

    assert paths(endpoint) == ["/alerts", "/cb"]
    assert_backing_off(poisoned, says="callback refused")
    # Behind its backoff it is not tried again at once, and nothing else is left.
    assert send_due(budget=10) == {"sent": 0, "failed": 0}


def test_a_poisoned_callback_is_given_up_after_its_attempts_like_any_callback(alice, endpoint):
    poisoned = insert_old_row("callback", json.dumps({"callback_url": "http://x/\r\n"}))
    Alert.objects.filter(pk=poisoned).update(attempts=CALLBACK_ATTEMPTS - 1)

    assert send_due(budget=10) == {"sent": 0, "failed": 1}

    alert = Alert.objects.get(pk=poisoned)
    assert alert.sent_at is not None and alert.delivered == ["abandoned"]
    assert alert.last_error.startswith("given up: callback refused")


@pytest.mark.parametrize(
    ("kind", "payload", "delivered", "says"),
    [
        ("halt", '"not an object"', "[]", "not a JSON object"),
        ("halt", "[1, 2]", "[]", "not a JSON object"),
        ("retired_kind", '{"summary": "from an older version"}', "[]", "ValueError"),
        ("callback", '{"callback_url": ["a", "list"]}', "[]", "callback refused"),
    ],
)
def test_a_row_that_cannot_be_read_or_sent_is_a_failed_attempt_and_the_rest_go_out(
    db, endpoint, kind, payload, delivered, says
):
    broken = insert_old_row(kind, payload, delivered=delivered)
    outbox.notify("halt", "halt:2", {"summary": "run r1 halted"})

    assert send_due(budget=10) == {"sent": 1, "failed": 1}

    assert paths(endpoint) == ["/alerts"]
    assert_backing_off(broken, says=says)


def test_a_row_with_a_malformed_delivered_list_is_still_delivered_and_recorded(db, endpoint):
    # `finish` merges the stored list with the new channel; a number in it used to make that
    # merge, and so the recording of the row, fail.
    odd = insert_old_row("halt", '{"summary": "s"}', delivered='[1, "email", {"x": 1}]')

    assert send_due(budget=10) == {"sent": 1, "failed": 0}

    assert Alert.objects.get(pk=odd).delivered == ["email", "webhook"]


def test_a_row_that_failed_waits_behind_rows_that_became_due_before_its_backoff_ended(db):
    poisoned = insert_old_row("halt", '{"summary": "always fails"}', minutes=60)
    # It failed and its backoff ended a second ago; the good row was due a minute ago.
    Alert.objects.filter(pk=poisoned).update(
        attempts=3, leased_until=timezone.now() - timedelta(seconds=1)
    )
    good = insert_old_row("halt", '{"summary": "waiting"}', minutes=1)

    assert [str(row.id) for row in outbox.lease(1)] == [good]
    assert [str(row.id) for row in outbox.lease(1)] == [poisoned]


# --- Agent-chosen text in what people read ---------------------------------------------------


def overdue_review_alert_for(alice, **intent) -> Effect:
    """An effect of alice's with an overdue review item, and its alert in the outbox."""
    created = alice.intent(**intent)
    assert open_review(created["id"], "no_lookup")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reviews_reviewitem SET opened_at = now() - interval '30 hours', "
            "due_at = now() - interval '6 hours' WHERE effect_id = %s",
            [created["id"]],
        )
    assert sweep() == 1
    return Effect.objects.get(pk=created["id"])


def test_a_line_break_in_a_run_id_reaches_email_as_a_clean_one_line_subject(
    alice, settings, mailoutbox
):
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    overdue_review_alert_for(alice, run_id="r1\r\nBcc: evil@example.com", step_id="s\n1")

    assert send_due(budget=10) == {"sent": 1, "failed": 0}

    [mail] = mailoutbox
    assert "\r" not in mail.subject and "\n" not in mail.subject
    assert "r1\\r\\nBcc: evil@example.com:s\\n1" in mail.subject
    assert mail.recipients() == ["ops@example.com"]
    raw = mail.message().as_bytes()
    assert b"\nBcc:" not in raw
    assert "run_id: r1\\r\\nBcc: evil@example.com" in mail.body
    assert not any(line.startswith("Bcc:") for line in mail.body.splitlines())


def test_slack_markup_in_agent_chosen_values_arrives_escaped_and_the_ledger_link_works(
    alice, endpoint, settings
):
    settings.LEDGER_ALERT_WEBHOOK_FORMAT = "slack"
    settings.LEDGER_ALERT_LINK_BASE = "https://ledger.example.com"
    effect = overdue_review_alert_for(
        alice, run_id="<!channel>", effect_key="<https://evil.example|Re-login> & <@U123>"
    )

    assert send_due(budget=10) == {"sent": 1, "failed": 0}

    [request] = endpoint.received
    text = json.loads(request.body)["text"]
    assert "&lt;!channel&gt;" in text
    assert "&lt;https://evil.example|Re-login&gt; &amp; &lt;@U123&gt;" in text
    # The one piece of Slack markup is the ledger's own link.
    assert re.findall(r"<[^>]*>", text) == [
        f"<https://ledger.example.com/effects/{effect.id}/|Open in Effect Ledger>"
    ]


def test_the_json_webhooks_summary_is_one_line(alice, endpoint):
    overdue_review_alert_for(alice, run_id="r1\nforged line")

    send_due(budget=10)

    [request] = endpoint.received
    document = json.loads(request.body)
    assert "\n" not in document["summary"] and "r1\\nforged line" in document["summary"]
    assert document["payload"]["run_id"] == "r1\nforged line"  # the data itself, as given
