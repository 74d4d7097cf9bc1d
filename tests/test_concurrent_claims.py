"""Many claimers, separate connections, one effect: exactly one wins."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection

from tests.helpers import AgentClient, events_of

CLAIMERS = 16


def _race(alice: AgentClient, path: str, bodies: list[dict]) -> list[tuple[int, dict]]:
    """POST every body at once from its own thread (and so its own database connection)."""
    barrier = threading.Barrier(len(bodies))
    results: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def worker(body: dict) -> None:
        client = AgentClient(alice.agent, alice.key)
        try:
            barrier.wait()
            response = client.post(path, body)
            with lock:
                results.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.django_db(transaction=True)
def test_exactly_one_of_many_concurrent_claimers_wins(alice):
    effect = alice.intent()
    bodies = [{"owner": f"worker-{i}", "claim_id": f"claim-{i}"} for i in range(CLAIMERS)]
    results = _race(alice, f"/effects/{effect['id']}/claim", bodies)

    codes = Counter(code for code, _ in results)
    assert codes == {200: 1, 409: CLAIMERS - 1}
    winners = [body for code, body in results if code == 200]
    assert winners[0]["attempt"] == 1
    claims = [e for e in events_of(effect["id"]) if e.to_status == "dispatching"]
    assert len(claims) == 1
    assert claims[0].data["owner"] == winners[0]["lease_owner"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_intents_record_one_effect(alice):
    body = {
        "run_id": "race",
        "step_id": "pay",
        "tool": "charge_card",
        "target": "acct_1",
        "request": {"amount": "5.00"},
    }
    results = _race(alice, "/effects", [body] * 8)
    codes = Counter(code for code, _ in results)
    assert codes == {201: 1, 200: 7}
    assert len({payload["id"] for _, payload in results}) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_outcomes_under_one_lease_apply_once(alice):
    effect = alice.intent()
    token = alice.claim(effect["id"])["lease_token"]
    bodies = [
        {"lease_token": token, "status": "confirmed", "provider_ref": f"ref-{i}"} for i in range(8)
    ]
    results = _race(alice, f"/effects/{effect['id']}/outcome", bodies)
    codes = Counter(code for code, _ in results)
    assert codes == {200: 1, 409: 7}
    kinds = Counter(e.kind for e in events_of(effect["id"]) if e.to_status == "confirmed")
    # One transition; the seven losers' reports are kept as evidence.
    assert kinds == {"transition": 1, "late_outcome": 7}
