"""Agent notifications: the long poll (GET /effects/{id}?wait=N), its waiter cap, and signed
callbacks through the alert outbox, against real PostgreSQL (LISTEN/NOTIFY) and a local HTTP
receiver."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from ledger_client import Ledger

from ledger.api import longpoll
from ledger.models import Alert, Effect
from reviews.alerts.sender import CALLBACK_ATTEMPTS, send_due
from tests.helpers import AgentClient, assert_error

CALLBACK_SECRET = "callback-secret-0123456789abcdef"


def _until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


class Poll(threading.Thread):
    """One long poll from a thread of its own (its own database connection), timed."""

    def __init__(self, agent: AgentClient, effect_id: str, wait: int) -> None:
        super().__init__(daemon=True)
        self.client = AgentClient(agent.agent, agent.key)
        self.effect_id, self.wait = effect_id, wait
        self.response: Any = None
        self.answered_at = 0.0

    def run(self) -> None:
        try:
            self.response = self.client.get(f"/effects/{self.effect_id}", {"wait": self.wait})
            self.answered_at = time.monotonic()
        finally:
            connection.close()


def _poll(agent: AgentClient, effect_id: str, wait: int, waiting: int = 1) -> Poll:
    poll = Poll(agent, effect_id, wait)
    poll.start()
    _until(lambda: longpoll.waiting_now() == waiting)
    return poll


def _backends() -> dict[str, int]:
    """This test database's connections other than this thread's, by application name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "GROUP BY application_name"
        )
        return dict(cursor.fetchall())


def test_a_long_poll_answers_within_a_second_of_a_change_committed_by_another_connection(
    transactional_db, alice
):
    effect = alice.intent()
    poll = _poll(alice, effect["id"], wait=30)
    changed_at = time.monotonic()
    alice.claim(effect["id"])  # this thread's connection, committed at once
    poll.join(10)
    assert poll.response.status_code == 200, poll.response.content
    assert poll.response.json()["status"] == "dispatching"
    assert poll.answered_at - changed_at < 1.0
    assert "lease_token" not in poll.response.json()  # the waiter is not the claimer


def test_a_cascade_in_raw_sql_wakes_the_waiters_of_the_effects_it_cancels(transactional_db, alice):
    upstream = alice.intent(step_id="charge")
    downstream = alice.intent(step_id="ship", depends_on=[upstream["id"]])
    poll = _poll(alice, downstream["id"], wait=30)
    alice.post(f"/effects/{upstream['id']}/cancel", {"reason": "changed my mind"})
    poll.join(10)
    assert poll.response.json()["status"] == "cancelled"


def test_a_long_poll_without_a_change_answers_with_the_current_state_after_its_wait(
    transactional_db, alice
):
    effect = alice.intent()
    asked = time.monotonic()
    response = alice.get(f"/effects/{effect['id']}", {"wait": 1})
    took = time.monotonic() - asked
    assert response.status_code == 200
    assert response.json()["status"] == "planned"
    assert 1.0 <= took < 2.5
    assert "Retry-After" not in response


@pytest.mark.parametrize("wait", ["0", "61", "-1", "soon"])
def test_a_wait_outside_one_to_sixty_seconds_is_refused(alice, wait):
    effect = alice.intent()
    body = assert_error(
        alice.get(f"/effects/{effect['id']}", {"wait": wait}), 422, "validation_error"
    )
    assert "wait" in body["fields"]


def test_another_agents_effect_is_not_found_for_a_long_poll_too(transactional_db, alice, bob):
    effect = alice.intent()
    assert_error(bob.get(f"/effects/{effect['id']}", {"wait": 1}), 404, "not_found")
    assert longpoll.waiting_now() == 0


def test_past_the_waiter_cap_a_long_poll_is_answered_at_once_with_retry_after(
    transactional_db, alice, settings
):
    settings.LEDGER_MAX_WAITERS = 1
    first, second = alice.intent(step_id="a"), alice.intent(step_id="b")
    poll = _poll(alice, first["id"], wait=30)
    asked = time.monotonic()
    response = alice.get(f"/effects/{second['id']}", {"wait": 30})
    assert time.monotonic() - asked < 0.5
    assert response.status_code == 200
    assert response.json()["status"] == "planned"
    assert int(response["Retry-After"]) >= 1
    alice.post(f"/effects/{first['id']}/cancel", {})
    poll.join(10)
    assert longpoll.waiting_now() == 0
    # The place is free again: the next long poll waits.
    asked = time.monotonic()
    response = alice.get(f"/effects/{second['id']}", {"wait": 1})
    assert time.monotonic() - asked >= 1.0 and "Retry-After" not in response


def test_waiters_hold_no_database_connection_while_they_wait(transactional_db, alice, settings):
    settings.LEDGER_MAX_WAITERS = 10
    effects = [alice.intent(step_id=f"s{n}") for n in range(3)]
    longpoll.process_waiters()  # the listener's own connection exists before the count
    before = _backends()
    polls = [_poll(alice, e["id"], wait=30, waiting=n + 1) for n, e in enumerate(effects)]
    time.sleep(0.2)  # let each waiter settle into its wait after its first read
    during = _backends()
    assert during == before
    assert during.get(longpoll.APPLICATION_NAME) == 1  # one listener for all three waiters
    for effect in effects:
        alice.post(f"/effects/{effect['id']}/cancel", {})
    for poll in polls:
        poll.join(10)
        assert poll.response.json()["status"] == "cancelled"


# --- Callbacks -------------------------------------------------------------------------------


@pytest.fixture
def callbacks(settings) -> Iterator[Receiver]:
    receiver = Receiver()
    settings.LEDGER_CALLBACK_ALLOW = [receiver.origin]
    settings.LEDGER_CALLBACK_SECRET = CALLBACK_SECRET
    yield receiver
    receiver.close()


class Receiver:
    """An agent's callback endpoint on a local port: records what it is sent."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.answer = 204
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.answer)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.origin}/ledger-callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _signed(headers: dict[str, str], body: bytes) -> bool:
    parts = dict(p.split("=", 1) for p in headers["X-Ledger-Signature"].split(","))
    expected = hmac.new(
        CALLBACK_SECRET.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256
    ).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.example/hook",
        "http://127.0.0.1.evil.example/hook",
        "ftp://127.0.0.1/hook",
        "http://user:secret@127.0.0.1/hook",
        "not a url",
        "http://127.0.0.1:99999/hook",
    ],
)
def test_a_callback_url_outside_the_allow_list_is_refused_and_nothing_is_recorded(
    alice, callbacks, url
):
    body = alice.intent(callback_url=url, expect=422)
    assert body["error"] == "validation_error"
    assert "callback_url" in body["fields"]
    assert not Effect.objects.exists()


def test_with_no_allowed_hosts_every_callback_url_is_refused(alice, settings):
    settings.LEDGER_CALLBACK_ALLOW = []
    alice.intent(callback_url="http://127.0.0.1/hook", expect=422)


def test_each_status_change_is_posted_signed_to_the_callback_url_through_the_outbox(
    alice, callbacks
):
    effect = alice.intent(callback_url=callbacks.url, request={"amount": "10.00", "card": "x"})
    token = alice.claim(effect["id"])["lease_token"]
    alice.outcome(effect["id"], token, "confirmed", provider_ref="ch_1")
    plain = alice.intent(step_id="no-callback")
    alice.claim(plain["id"])
    assert Alert.objects.filter(kind="callback").count() == 2  # none for the effect without one

    assert send_due(budget=10) == {"sent": 2, "failed": 0}

    changes = []
    for headers, body in callbacks.received:
        assert _signed(headers, body)
        document = json.loads(body)
        assert headers["Idempotency-Key"] == document["id"]
        assert "request" not in document and "callback_url" not in document
        changes.append((document["effect_id"], document["from_status"], document["status"]))
    assert changes == [
        (effect["id"], "planned", "dispatching"),
        (effect["id"], "dispatching", "confirmed"),
    ]
    assert not Alert.objects.filter(kind="callback", sent_at__isnull=True).exists()


def test_an_intent_posted_with_its_claim_and_a_callback_gets_the_claims_callback(alice, callbacks):
    """Without a callback an intent with its claim is one INSERT (ledger.effects.hotpath); with one
    it
    is recorded planned and then claimed, so that the claim, like any change, is posted."""
    effect = alice.intent(callback_url=callbacks.url, claim=True, owner="w")
    assert effect["status"] == "dispatching"
    send_due(budget=10)
    changes = [json.loads(body) for _, body in callbacks.received]
    assert [(c["from_status"], c["status"]) for c in changes] == [("planned", "dispatching")]


def test_a_status_that_comes_back_is_posted_again(alice, callbacks):
    effect = alice.intent(callback_url=callbacks.url)
    token = alice.claim(effect["id"])["lease_token"]
    alice.outcome(effect["id"], token, "not_sent")
    alice.claim(effect["id"])
    send_due(budget=10)
    statuses = [json.loads(body)["status"] for _, body in callbacks.received]
    assert statuses == ["dispatching", "planned", "dispatching"]


def test_a_refused_callback_is_retried_then_given_up(alice, callbacks):
    callbacks.answer = 500
    effect = alice.intent(callback_url=callbacks.url)
    alice.claim(effect["id"])
    assert send_due(budget=10) == {"sent": 0, "failed": 1}
    alert = Alert.objects.get(kind="callback")
    assert alert.sent_at is None and "HTTP 500" in alert.last_error
    # Back-date: the backoff has passed, and this is the last attempt.
    Alert.objects.filter(pk=alert.pk).update(attempts=CALLBACK_ATTEMPTS - 1, leased_until=None)
    assert send_due(budget=10) == {"sent": 0, "failed": 1}
    alert.refresh_from_db()
    assert alert.sent_at is not None and alert.delivered == ["abandoned"]
    assert len(callbacks.received) == 2


# --- The client ------------------------------------------------------------------------------


def test_the_client_returns_as_soon_as_the_status_changes(live_server, alice):
    effect = alice.intent()
    ledger = Ledger(live_server.url, alice.key, owner="watcher")
    claimer = threading.Timer(0.5, lambda: AgentClient(alice.agent, alice.key).claim(effect["id"]))
    asked = time.monotonic()
    claimer.start()
    try:
        record = ledger.wait_for_change(effect["id"], timeout=20)
    finally:
        claimer.join()
        ledger.close()
    assert record.status == "dispatching"
    assert time.monotonic() - asked < 2.0


def test_the_client_returns_the_unchanged_effect_when_its_timeout_passes(live_server, alice):
    effect = alice.intent()
    with Ledger(live_server.url, alice.key, owner="watcher") as ledger:
        asked = time.monotonic()
        record = ledger.wait_for_change(effect["id"], status="planned", timeout=2)
    assert record.status == "planned"
    assert 1.0 <= time.monotonic() - asked < 4.0


def test_a_listen_url_gives_the_listener_a_connection_of_its_own(settings, db):
    """Behind a transaction pooler, LEDGER_LISTEN_URL points the LISTEN at PostgreSQL itself."""
    given = connection.settings_dict
    settings.LEDGER_LISTEN_URL = (
        f"postgresql://{given['USER']}@{given['HOST'] or '127.0.0.1'}:{given['PORT'] or 5432}"
        f"/{given['NAME']}"
    )
    params = longpoll._listen_params()
    assert params["conninfo"] == settings.LEDGER_LISTEN_URL
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f"LISTEN {longpoll.CHANNEL}")
        assert conn.execute("SELECT current_database()").fetchone()[0] == given["NAME"]
        name = conn.execute("SELECT current_setting('application_name')").fetchone()[0]
        assert name == longpoll.APPLICATION_NAME
