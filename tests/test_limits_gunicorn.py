"""Limits under real concurrency: gunicorn with two workers on the test database, and 16 clients
claiming at once against a cap. The cap is never exceeded, not even by one. And the interleaving
that would exceed it, forced: a second claim while the first one's charge is uncommitted."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.db import connection, transaction

from ledger.containment.keys import issue_key
from ledger.effects.intents import Intent, record_intent
from ledger.effects.transitions import claim
from ledger.models import Agent, AmountCharge, LimitCounter, Tool
from ledger.policy.tools import policy_for
from ledger.rules.limits import LimitExceeded
from tests.factories import gunicorn_on_test_database

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 16
PER_CLIENT = 4
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(tools, tmp_path) -> Iterator[str]:
    with gunicorn_on_test_database(
        tmp_path, workers=2, threads=8, env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    ) as (url, _proc, _log):
        yield url


def _claim_all(url: str, key: str, amount: str) -> Counter[int]:
    """16 clients at once, each posting intents with their claims; the status codes."""

    def client(n: int) -> list[int]:
        codes = []
        # A connection per client: gunicorn spreads them over both workers.
        with httpx.Client(trust_env=False, timeout=30) as http:
            for i in range(PER_CLIENT):
                codes.append(
                    http.post(
                        f"{url}/api/v1/effects",
                        headers={"Authorization": f"Bearer {key}"},
                        json={
                            "run_id": "limits",
                            "step_id": f"{n}-{i}",
                            "tool": "charge_card",
                            "target": "acct_42",
                            "request": {"amount": amount, "currency": "EUR"},
                            "claim": True,
                            "owner": f"w{n}",
                        },
                    ).status_code
                )
        return codes

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        return Counter(code for codes in pool.map(client, range(CLIENTS)) for code in codes)


def _claimed() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ledger_effect WHERE status = 'dispatching'")
        return cursor.fetchone()[0]


def test_sixteen_clients_never_pass_an_amount_cap_not_even_by_one(server):
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", limit_amount_per_day={"EUR": "20.00"}
    )
    key = issue_key(Agent.objects.create(name="spender"))

    codes = _claim_all(server, key, "1.00")

    # 64 claims of 1.00 against 20.00 a day: exactly 20 get through, the rest are refused.
    assert codes == {201: 20, 429: CLIENTS * PER_CLIENT - 20}
    assert _claimed() == 20
    assert sum(c.amount_minor for c in AmountCharge.objects.all()) == 2000


def test_sixteen_clients_never_pass_an_agents_claims_per_minute(server):
    spender = Agent.objects.create(name="spender", limit_claims_per_minute=12)
    key = issue_key(spender)

    codes = _claim_all(server, key, "1.00")

    counters = list(LimitCounter.objects.filter(scope=f"agent:{spender.id}"))
    # Within one calendar minute, or two when the run straddles one: never more than 12 each.
    assert counters and all(c.used <= 12 for c in counters)
    assert codes[201] == sum(c.used for c in counters) == _claimed()
    assert codes[201] + codes[429] == CLIENTS * PER_CLIENT
    assert codes[201] <= 12 * len(counters) and codes[429] > 0


def test_a_claim_under_the_same_amount_limit_waits_for_the_one_in_flight_and_sees_it(tools):
    """The race the lock closes: B sums the charges while A's is not committed yet."""
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", limit_amount_per_day={"EUR": "15.00"}
    )
    agent = Agent.objects.create(name="racer")
    # The limit's lock row exists already (it does after the first charge of a day), so that
    # creating it does not order the two claims by itself.
    LimitCounter.objects.create(scope="tool:charge_card", period="24h", currency="EUR")
    first, second = (
        record_intent(
            agent,
            Intent("race", step, "charge_card", "acct_42", {"amount": "10.00", "currency": "EUR"}),
            policy_for("charge_card"),
            actor="test",
        )[0]
        for step in ("a", "b")
    )
    held, done = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def claim_first() -> None:
        with transaction.atomic():
            claim(first, owner="a", claim_id=None, lease_seconds=60, actor="test")
            held.set()
            done.wait(10)  # commit only when told
        connection.close()

    def claim_second() -> None:
        try:
            claim(second, owner="b", claim_id=None, lease_seconds=60, actor="test")
            outcome["second"] = "claimed"
        except LimitExceeded as exc:
            outcome["second"] = exc.extra["limit"]["current"]
        finally:
            connection.close()

    a = threading.Thread(target=claim_first)
    a.start()
    assert held.wait(10)
    b = threading.Thread(target=claim_second)
    b.start()
    deadline = time.monotonic() + 5
    while not _someone_waits_for_a_lock():
        assert time.monotonic() < deadline, "the second claim did not wait for the first"
        time.sleep(0.05)
    done.set()
    a.join(10)
    b.join(10)

    assert outcome == {"second": "10.00"}


def _someone_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0
