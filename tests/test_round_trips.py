"""PostgreSQL round trips per agent call on the success path, counted at the wire.

libpq's protocol trace of the request's connection is read back, and every `ReadyForQuery`
the server sends ends one round trip: a simple query, an extended-protocol Sync, and BEGIN,
COMMIT and SAVEPOINT each count. The database runs in autocommit here (transactional_db), as
it does under gunicorn, so no test transaction hides a BEGIN or turns one into a SAVEPOINT.

The budget (ledger.effects.hotpath): intent with its claim, one write; outcome, one read and one
write. Authentication reads the key at most every `agentkeys.RECHECK_SECONDS` per process:
a call that finds its process's copy stale pays that one read on top, and is counted apart.

Which of the two a counted call meets is chosen by each test, not by the clock: the windows
are widened for the whole module (`steady`), so a call traced after its warm-up finds the key
and the configuration version fresh however slowly this machine runs, and the stale case
expires the process's copy itself (`configversion.expire()`).

What the connection brings into the window is fixed the same way (`own_connection`): each test
opens a connection of its own before its warm-up and keeps it to the end, whatever its age.
A connection kept from the worker's earlier tests would bring their state: a maximum age
(`CONN_MAX_AGE`) that closes it at some request's start, so that its replacement prepares the
warm statements again, one of them inside the window (a round trip of its own); an error, for
which Django checks the connection at the next request's start (`SELECT 1`); or psycopg's
hundred prepared statements, one of which it deallocates when the window prepares one more.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from psycopg import pq

from ledger.models import Effect, EffectEvent, Tool
from ledger.policy import agentkeys, configversion, keyuse

pytestmark = pytest.mark.usefixtures("transactional_db", "steady", "own_connection")


@pytest.fixture
def steady(monkeypatch) -> None:
    """A process under load: every request within the key's recheck window and the version's
    staleness bound, however long the warm-up or the tracing takes here."""
    monkeypatch.setattr(agentkeys, "RECHECK_SECONDS", 600.0)
    monkeypatch.setattr(configversion, "STALE_AFTER", 600.0)
    # The key's last use is stamped by the call's own write at most once a minute: a call
    # traced a minute after the warm-up's stamp would send the stamping text of its statement,
    # which the warm-up ran only once (not yet prepared).
    monkeypatch.setattr(keyuse, "INTERVAL_SECONDS", 600)


@pytest.fixture
def own_connection(monkeypatch) -> None:
    """A new connection for the test, closed by no maximum age while it runs."""
    connection.close()
    connection.ensure_connection()
    monkeypatch.setattr(connection, "close_at", None)


def _traced(call: Callable[[], Any]) -> tuple[Any, int, list[str]]:
    """(what `call` returned, round trips, the statements sent)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace"
        with path.open("w") as trace:
            pgconn.trace(trace.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            try:
                result = call()
            finally:
                pgconn.untrace()
        text = path.read_text(errors="replace")
    statements = re.findall(r"^F\s+\d+\s+(?:Query|Parse)\s+(.*)$", text, flags=re.MULTILINE)
    return result, text.count("ReadyForQuery"), statements


def _intent_with_claim(client, step: str):
    return client.post(
        "/effects",
        {
            "run_id": "rt",
            "step_id": step,
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "1.00", "currency": "EUR"},
            "claim": True,
            "owner": "worker-1",
        },
    )


def _confirm(client, effect: dict[str, Any]):
    return client.post(
        f"/effects/{effect['id']}/outcome",
        {
            "lease_token": effect["lease_token"],
            "status": "confirmed",
            "provider_ref": "ch_1",
            "response": {"id": "ch_1"},
        },
    )


def _warm(client) -> None:
    """Lifecycles first: the tool's policy is cached, the key recently read, and psycopg has
    prepared the statements (after `prepare_threshold` uses; preparing costs a round trip)."""
    threshold = connection.settings_dict["OPTIONS"]["prepare_threshold"] or 0
    for n in range(threshold + 2):  # the first call also stamps the key: another text
        effect = _intent_with_claim(client, f"warm-up-{n}").json()
        assert _confirm(client, effect).status_code == 200


def test_an_intent_with_its_claim_is_one_statement(alice):
    _warm(alice)
    response, trips, statements = _traced(lambda: _intent_with_claim(alice, "s1"))
    assert response.status_code == 201, response.content
    assert trips == 1, statements
    assert not any(s.strip('"').upper().startswith(("BEGIN", "SAVEPOINT")) for s in statements)
    effect = Effect.objects.get(pk=response.json()["id"])
    assert (effect.status, effect.attempt) == ("dispatching", 1)
    assert list(
        EffectEvent.objects.filter(effect=effect).order_by("id").values_list("reason", flat=True)
    ) == ["intent", "claimed"]


def test_an_outcome_is_one_read_and_one_write(alice):
    _warm(alice)
    effect = _intent_with_claim(alice, "s1").json()
    response, trips, statements = _traced(lambda: _confirm(alice, effect))
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "confirmed"
    assert trips == 2, statements
    assert Effect.objects.get(pk=effect["id"]).status == "confirmed"


def test_a_stale_key_costs_one_read_more_and_nothing_else(alice):
    _warm(alice)
    configversion.expire()
    response, trips, statements = _traced(lambda: _intent_with_claim(alice, "s1"))
    assert response.status_code == 201
    assert trips == 2, statements
    effect = response.json()
    configversion.expire()
    response, trips, statements = _traced(lambda: _confirm(alice, effect))
    assert response.status_code == 200
    assert trips == 3, statements


def test_limits_and_halts_cost_no_round_trip_on_the_success_path(alice):
    """They are checked by triggers inside the one write (migrations 0008 and 0014)."""
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount",
        currency_path="currency",
        limit_claims_per_minute=100,
        limit_amount_per_day={"EUR": "100.00"},
    )
    _warm(alice)
    response, trips, statements = _traced(lambda: _intent_with_claim(alice, "s1"))
    assert response.status_code == 201, response.content
    assert trips == 1, statements


def test_a_repeat_takes_the_general_path_and_answers_the_same(alice):
    _warm(alice)
    body = {
        "run_id": "rt",
        "step_id": "s1",
        "tool": "charge_card",
        "target": "acct_42",
        "request": {"amount": "1.00", "currency": "EUR"},
        "claim": True,
        "owner": "worker-1",
        "claim_id": "claim-1",
    }
    first = alice.post("/effects", body)
    again = alice.post("/effects", body)
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["lease_token"] == first.json()["lease_token"]
    assert Effect.objects.filter(run_id="rt", step_id="s1").count() == 1
