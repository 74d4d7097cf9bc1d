"""Alerts: review items count down to their due time; the outbox tells people once per
threshold, at least once per channel, through one sender at a time.

Time is the database's: items are made old by back-dating `opened_at` and `due_at` in SQL.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from ledger.models import Alert, ReviewItem
from ledger.policy.toolfile import load
from ledger.rules import outbox
from ledger.rules.reviewqueue import open_review
from reviews.alerts.due import sweep
from reviews.alerts.sender import send_due
from tests.factories import created_ago
from tests.fixtures.effects import TOOLS
from tests.helpers import ROOT

SECRET = "alert-webhook-secret-0123456789"


def item_for(effect) -> ReviewItem:
    assert open_review(effect.id, "no_lookup")
    return ReviewItem.objects.get(effect=effect, resolved_at__isnull=True)


def age(item: ReviewItem, elapsed: timedelta, window: timedelta = timedelta(hours=24)) -> None:
    """Make the item opened `elapsed` ago with `window` to resolve it, by the database clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reviews_reviewitem SET opened_at = now() - make_interval(secs => %s), "
            "due_at = now() - make_interval(secs => %s) + make_interval(secs => %s) WHERE id = %s",
            [elapsed.total_seconds(), elapsed.total_seconds(), window.total_seconds(), item.id],
        )


def alerts() -> list[tuple[str, str]]:
    return sorted(Alert.objects.values_list("kind", "key"))


# --- resolve_within sets when an item is due -------------------------------------------------


def test_an_item_is_due_24_hours_after_it_opens_by_default(make_effect):
    item = item_for(make_effect("unknown"))

    assert item.due_at - item.opened_at == timedelta(hours=24)


def test_a_tools_resolve_within_sets_the_due_time_when_its_back_office_window_closes_later(
    make_effect, tools
):
    tools["charge_card"].resolve_within = timedelta(hours=4)
    tools["charge_card"].backoffice_window = timedelta(days=2)
    tools["charge_card"].save()

    item = item_for(make_effect("unknown"))

    assert item.due_at - item.opened_at == timedelta(hours=4)


def test_an_item_is_due_when_the_back_office_window_closes_if_that_comes_first(make_effect, tools):
    # charge_card: resolve_within 24 h; its provider can void or refund for 7 days.
    tools["charge_card"].backoffice_window = timedelta(days=7)
    tools["charge_card"].save()
    effect = created_ago(make_effect("unknown"), timedelta(days=6, hours=20))

    item = item_for(effect)

    effect.refresh_from_db()
    assert item.due_at == effect.created_at + timedelta(days=7)
    assert item.due_at - item.opened_at == timedelta(hours=4)


def test_a_back_office_window_already_closed_leaves_the_item_its_resolve_within(make_effect, tools):
    tools["charge_card"].backoffice_window = timedelta(days=7)
    tools["charge_card"].save()
    effect = created_ago(make_effect("unknown"), timedelta(days=8))

    item = item_for(effect)

    assert item.due_at - item.opened_at == timedelta(hours=24)


def test_resolve_within_is_declared_in_the_tool_file(db, tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text('[tools.pager]\npreset = "unsafe"\nresolve_within = "2h"\n')
    load(path)
    load(TOOLS)

    from ledger.models import Tool

    assert Tool.objects.get(name="pager").resolve_within == timedelta(hours=2)
    assert Tool.objects.get(name="charge_card").resolve_within == timedelta(hours=24)


# --- The sweep: once at 75%, once when overdue -----------------------------------------------


def test_an_item_alerts_once_past_75_percent_of_its_time_and_once_when_overdue(make_effect):
    item = item_for(make_effect("unknown"))
    key = str(item.id)

    age(item, timedelta(hours=17, minutes=59))
    assert sweep() == 0
    assert alerts() == []

    age(item, timedelta(hours=18, minutes=1))
    assert sweep() == 1
    assert sweep() == 0
    assert alerts() == [("review_due_soon", key)]

    age(item, timedelta(hours=24, minutes=1))
    assert sweep() == 1
    assert sweep() == 0
    assert alerts() == [("review_due_soon", key), ("review_overdue", key)]


def test_an_item_first_seen_overdue_gets_only_the_overdue_alert(make_effect):
    item = item_for(make_effect("unknown"))
    age(item, timedelta(hours=30))

    assert sweep() == 1

    assert alerts() == [("review_overdue", str(item.id))]
    alert = Alert.objects.get()
    assert alert.payload["effect_id"] == str(item.effect_id)
    assert alert.payload["link"] == f"/effects/{item.effect_id}/"
    assert alert.payload["agent"] == "alice"


def test_the_threshold_follows_each_items_own_window(make_effect):
    short, long = item_for(make_effect("unknown")), item_for(make_effect("unknown"))
    age(short, timedelta(hours=3, minutes=1), window=timedelta(hours=4))
    age(long, timedelta(hours=3, minutes=1), window=timedelta(hours=24))

    assert sweep() == 1

    assert alerts() == [("review_due_soon", str(short.id))]


def test_a_resolved_item_never_alerts(make_effect):
    item = item_for(make_effect("unknown"))
    age(item, timedelta(days=3))
    ReviewItem.objects.filter(pk=item.pk).update(resolved_at=item.opened_at)

    assert sweep() == 0


# --- notify: the way in for halts and limit breaches -----------------------------------------


def test_notify_keeps_exact_amounts_and_times_in_the_payload(db):
    since = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    outbox.notify(
        "limit_exceeded",
        "agent:alice:amount:2026-12-03",
        {"max": Decimal("100.10"), "since": since},
    )

    [alert] = outbox.lease(1)
    assert alert.payload == {"max": Decimal("100.10"), "since": "2026-12-03T09:00:00Z"}


def test_notify_enqueues_an_alert_once_per_kind_and_key(db):
    assert outbox.notify("halt", "halt:7", {"summary": "tool charge_card halted"}) is True
    assert outbox.notify("halt", "halt:7", {"summary": "again"}) is False
    assert outbox.notify("limit_exceeded", "halt:7", {}) is True

    assert Alert.objects.get(kind="halt").payload == {"summary": "tool charge_card halted"}
    with pytest.raises(ValueError):
        outbox.notify("gossip", "x", {})
    with pytest.raises(ValueError):
        outbox.notify("halt", "", {})


# --- The sender --------------------------------------------------------------------------------


class Receiver:
    """A real HTTP server in a thread that answers with the statuses it is given, in turn, and
    keeps what it received."""

    def __init__(self, statuses: list[int], delay: float = 0.0) -> None:
        self.statuses = statuses
        self.delay = delay
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(receiver.delay)
                with receiver.lock:
                    receiver.received.append((dict(self.headers), body))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"

    def keys(self) -> list[str]:
        return [headers["Idempotency-Key"] for headers, _ in self.received]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver([200])
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def webhook(settings, receiver) -> Receiver:
    settings.LEDGER_ALERT_WEBHOOK_URL = receiver.url
    settings.LEDGER_ALERT_WEBHOOK_SECRET = SECRET
    settings.LEDGER_ALERT_WEBHOOK_FORMAT = "json"
    return receiver


def verify(headers: dict[str, str], body: bytes) -> None:
    parts = dict(p.split("=", 1) for p in headers["X-Ledger-Signature"].split(","))
    expected = hmac.new(
        SECRET.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(parts["v1"], expected)
    assert abs(time.time() - int(parts["t"])) < 60


def test_an_email_goes_once_with_the_alert_id_as_message_id(db, settings, mailoutbox):
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    outbox.notify("halt", "halt:1", {"summary": "everything halted", "reason": "double charge"})
    alert = Alert.objects.get()

    assert send_due() == {"sent": 1, "failed": 0}
    assert send_due() == {"sent": 0, "failed": 0}

    assert len(mailoutbox) == 1
    message = mailoutbox[0].message()
    assert message["Message-ID"] == f"<{alert.id}@effect-ledger.alerts>"
    assert message["To"] == "ops@example.com"
    assert "everything halted" in message["Subject"]
    assert "reason: double charge" in mailoutbox[0].body
    alert.refresh_from_db()
    assert alert.sent_at is not None
    assert alert.delivered == ["email"]


def test_a_review_alert_links_to_the_effect_page(make_effect, settings, mailoutbox):
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    settings.LEDGER_ALERT_LINK_BASE = "https://ledger.example.com"
    item = item_for(make_effect("unknown"))
    age(item, timedelta(hours=25))
    sweep()

    send_due()

    assert f"https://ledger.example.com/effects/{item.effect_id}/" in mailoutbox[0].body
    assert "overdue" in mailoutbox[0].subject.lower()


def test_a_webhook_is_signed_and_carries_the_alert_id_as_idempotency_key(db, webhook):
    outbox.notify("limit_exceeded", "tool:charge_card:claims:2026-12-03T09:00", {"max": 5})
    alert = Alert.objects.get()

    assert send_due() == {"sent": 1, "failed": 0}

    [(headers, body)] = webhook.received
    verify(headers, body)
    assert headers["Idempotency-Key"] == str(alert.id)
    document = json.loads(body)
    assert document["id"] == str(alert.id)
    assert document["kind"] == "limit_exceeded"
    assert document["payload"] == {"max": 5}


def test_a_tampered_body_does_not_verify(db, webhook):
    outbox.notify("halt", "halt:2", {"summary": "run r1 halted"})
    send_due()
    [(headers, body)] = webhook.received

    with pytest.raises(AssertionError):
        verify(headers, body.replace(b"r1", b"r2"))


def test_the_slack_format_posts_a_text_message(db, webhook, settings):
    settings.LEDGER_ALERT_WEBHOOK_FORMAT = "slack"
    outbox.notify("halt", "halt:3", {"summary": "agent planner halted"})

    send_due()

    [(headers, body)] = webhook.received
    document = json.loads(body)
    assert list(document) == ["text"]
    assert "agent planner halted" in document["text"]
    assert headers["Idempotency-Key"] == str(Alert.objects.get().id)


def test_a_failed_webhook_is_retried_later_and_the_email_is_not_sent_twice(
    db, webhook, settings, mailoutbox
):
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    webhook.statuses[:] = [500, 200]
    outbox.notify("halt", "halt:4", {"summary": "tool charge_card halted"})
    alert = Alert.objects.get()

    assert send_due() == {"sent": 0, "failed": 1}
    alert.refresh_from_db()
    assert alert.sent_at is None
    assert alert.last_error == "webhook: HTTP 500"
    assert alert.delivered == ["email"]
    # Not again at once: it waits out its backoff.
    assert send_due() == {"sent": 0, "failed": 0}

    Alert.objects.filter(pk=alert.pk).update(leased_until=alert.created_at)
    assert send_due() == {"sent": 1, "failed": 0}

    assert webhook.keys() == [str(alert.id), str(alert.id)]
    assert len(mailoutbox) == 1
    alert.refresh_from_db()
    assert alert.sent_at is not None
    assert alert.attempts == 2
    assert sorted(alert.delivered) == ["email", "webhook"]


def test_an_unreachable_webhook_is_a_failure_to_retry(db, settings):
    settings.LEDGER_ALERT_WEBHOOK_URL = "http://127.0.0.1:9/nobody-listens"
    settings.LEDGER_ALERT_WEBHOOK_SECRET = SECRET
    outbox.notify("halt", "halt:5", {})

    assert send_due() == {"sent": 0, "failed": 1}

    alert = Alert.objects.get()
    assert alert.sent_at is None
    assert alert.last_error.startswith("webhook: ConnectError")


def test_without_any_channel_an_alert_is_logged_and_not_kept_pending(db, caplog):
    outbox.notify("halt", "halt:6", {"summary": "everything halted"})

    assert send_due() == {"sent": 1, "failed": 0}

    assert "everything halted" in caplog.text
    assert Alert.objects.get().delivered == ["log"]


def test_a_sender_whose_lease_ran_out_cannot_record_over_the_next_one(db):
    outbox.notify("halt", "halt:8", {})
    [first] = outbox.lease(5)
    Alert.objects.filter(pk=first.id).update(leased_until=first.created_at)
    [second] = outbox.lease(5)

    assert outbox.finish(first, ["webhook"], "webhook: HTTP 500") is False
    assert outbox.finish(second, ["webhook"]) is True
    assert Alert.objects.get().last_error == ""


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_senders_never_send_one_alert_twice(webhook):
    for n in range(30):
        outbox.notify("halt", f"halt:{n}", {"n": n})
    # Slow enough that both senders are busy at once.
    webhook.delay = 0.02
    results: list[dict[str, int]] = []
    barrier = threading.Barrier(2)

    def sender() -> None:
        try:
            barrier.wait()
            results.append(send_due())
        finally:
            connection.close()

    threads = [threading.Thread(target=sender) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    keys = webhook.keys()
    assert sorted(keys) == sorted(str(pk) for pk in Alert.objects.values_list("id", flat=True))
    assert len(set(keys)) == len(keys) == 30
    assert all(result["sent"] > 0 for result in results), results
    assert not Alert.objects.filter(sent_at__isnull=True).exists()


def test_a_json_webhook_without_a_secret_stops_the_process_at_start():
    env = {
        **os.environ,
        "LEDGER_ALERT_WEBHOOK_URL": "https://hooks.example.com/ledger",
        "LEDGER_ALERT_WEBHOOK_SECRET": "",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "LEDGER_ALERT_WEBHOOK_SECRET" in result.stderr
