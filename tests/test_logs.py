"""Logs: one JSON object per line, carrying the request id, agent, effect and run of the call;
no key, password or card number in any line (the whole suite's lines are scanned by
tests/logscan.py; these tests show the scanner and the formatter each catch what they must).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from django.test import Client

from ledger.observability.jsonlog import JsonFormatter
from ledger.observability.logcontext import ContextFilter, scope
from tests.helpers import PASSWORD
from tests.logscan import find_secrets, known_secrets

VISA = "4111111111111111"
KEY = "elk_0123456789ab_" + "s3cr3t-part-of-the-key-0123456789"
EFFECT_ID = "00000000-4111-1111-1111-111111111111"  # digit groups, Luhn-valid when joined


class Lines(logging.Handler):
    """The lines production writes: its formatter and filter."""

    def __init__(self, *, scrubbed: bool = True) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter(scrubbed=scrubbed))
        self.addFilter(ContextFilter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def _attached(handler: Lines) -> Iterator[list[dict]]:
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler.lines
    root.removeHandler(handler)


@pytest.fixture
def lines() -> Iterator[list[dict]]:
    yield from _attached(Lines())


@pytest.fixture
def raw_lines() -> Iterator[list[dict]]:
    """What callers hand to the loggers, before the formatter's own scrubbing."""
    yield from _attached(Lines(scrubbed=False))


def test_a_line_is_one_json_object_with_time_level_logger_message_and_context(lines):
    with scope(request_id="req-1", agent="alice", effect_id=EFFECT_ID, run_id="order-7"):
        logging.getLogger("ledger.test").warning("checked %s times", 3, extra={"tool": "x"})

    (line,) = [line for line in lines if line["logger"] == "ledger.test"]
    assert line["timestamp"].endswith("+00:00")
    assert line["level"] == "WARNING"
    assert line["message"] == "checked 3 times"
    assert (line["request_id"], line["agent"], line["run_id"]) == ("req-1", "alice", "order-7")
    assert line["effect_id"] == EFFECT_ID  # an id is never taken for a card number
    assert line["tool"] == "x"


def test_an_exception_is_kept_in_the_same_line(lines):
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("ledger.test").exception("failed")

    (line,) = [line for line in lines if line["logger"] == "ledger.test"]
    assert "ValueError: boom" in line["exception"]


def test_an_api_call_logs_one_line_with_its_request_id_agent_effect_and_run(alice, lines):
    effect = alice.intent("order-77", claim=True)
    response = alice.post(
        f"/effects/{effect['id']}/outcome",
        {"lease_token": effect["lease_token"], "status": "confirmed"},
        **{"X-Request-ID": "trace-abc.1"},
    )

    assert response["X-Request-ID"] == "trace-abc.1"
    calls = [line for line in lines if line["logger"] == "ledger.requests"]
    assert [line["message"].split()[0] for line in calls] == ["POST", "POST"]
    created, reported = calls
    assert created["effect_id"] == effect["id"] and created["run_id"] == "order-77"
    assert created["agent"] == "alice" and created["status"] == 201
    assert reported["request_id"] == "trace-abc.1"
    assert reported["effect_id"] == effect["id"] and reported["run_id"] == "order-77"
    assert reported["status"] == 200 and reported["duration_ms"] >= 0


def test_a_request_without_an_id_or_with_a_bad_one_gets_a_fresh_one(db):
    plain = Client().get("/api/v1/health")
    forged = Client().get("/api/v1/health", headers={"X-Request-ID": "x" * 200})
    injected = Client().get("/api/v1/health", headers={"X-Request-ID": 'a" "level": "ERROR'})

    ids = {plain["X-Request-ID"], forged["X-Request-ID"], injected["X-Request-ID"]}
    assert len(ids) == 3
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_the_context_does_not_follow_a_thread_into_its_next_request(alice, lines):
    alice.intent("run-a", claim=True)
    Client().get("/api/v1/health")

    health = [line for line in lines if "/health" in line["message"]][-1]
    assert "agent" not in health and "run_id" not in health and "effect_id" not in health


def test_the_formatter_masks_keys_and_card_numbers_whatever_a_caller_logs():
    # A logger of its own that does not pass records on: the suite's scan must not see this
    # deliberate leak.
    leaky = logging.getLogger("tests.deliberate_leak")
    leaky.propagate = False
    handler = Lines()
    leaky.addHandler(handler)
    try:
        leaky.warning("key %s card %s", KEY, VISA, extra={"note": VISA})
    finally:
        leaky.removeHandler(handler)

    (line,) = handler.lines
    text = json.dumps(line)
    assert VISA not in text and "s3cr3t" not in text
    assert "elk_0123456789ab_…" in line["message"]  # the key's public name stays


def test_a_card_number_in_a_journal_url_stays_out_of_the_request_line(alice, raw_lines):
    alice.get(f"/runs/card-{VISA}/journal")

    (call,) = [line for line in raw_lines if line["logger"] == "ledger.requests"]
    assert "/journal" in call["message"]
    assert not find_secrets([json.dumps(call)], [])


# --- The scanner that checks the whole suite's lines ------------------------------------------


@pytest.mark.parametrize(
    ("leak", "what"),
    [
        (f"authenticated {KEY}", "an agent key"),
        (f"login as olga with {PASSWORD}", "a password or secret"),
        ("signing with test-webhook-secret-0123456789", "a password or secret"),
        (f"card 4111 1111 1111 1111 in {EFFECT_ID}", "a card number"),
    ],
)
def test_the_suite_scanner_finds_each_kind_of_secret(settings, leak, what):
    line = json.dumps({"message": leak, "effect_id": EFFECT_ID})

    assert find_secrets([line], known_secrets()) == [(what, line)]


def test_the_suite_scanner_passes_ordinary_lines():
    ordinary = [
        json.dumps(
            {
                "timestamp": "2025-01-31T12:00:00.123456+00:00",
                "message": f"POST /api/v1/effects/{EFFECT_ID}/claim 200",
                "request_id": "9f86d081884c7d659a2feaa0c55ad015",
                "agent": "alice",
                "duration_ms": 12.3,
                "key": "elk_0123456789ab",
            }
        )
    ]
    assert find_secrets(ordinary, known_secrets()) == []
