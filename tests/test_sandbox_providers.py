"""The sandbox providers, spoken to over real HTTP in their own processes, as the ledger will."""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.factories import CHARGE, charge, get, refund

if TYPE_CHECKING:
    from tests.fixtures.providers import SandboxProvider, StartSandbox

ROOT = Path(__file__).resolve().parent.parent

SECRET = "sandbox-webhook-secret-for-tests"


# --- Charges and idempotency ----------------------------------------------------------------


def test_a_charge_is_created_and_echoes_its_idempotency_key(payments_provider):
    response = charge(payments_provider, "key-1")

    assert response.status_code == 201
    assert response.headers["Idempotency-Key"] == "key-1"
    assert "Idempotent-Replayed" not in response.headers
    body = response.json()
    assert body["id"].startswith("ch_")
    assert body["object"] == "charge"
    assert body["status"] == "succeeded"
    assert (body["amount"], body["currency"], body["account"]) == ("10.00", "EUR", "acct_42")
    assert body["idempotency_key"] == "key-1"
    assert isinstance(body["created"], int)


def test_the_same_key_and_body_return_the_same_charge_marked_as_replayed(payments_provider):
    first = charge(payments_provider, "key-1").json()
    # The same amount written differently is the same request.
    again = charge(payments_provider, "key-1", {**CHARGE, "amount": 10.0})

    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Idempotency-Key"] == "key-1"
    assert again.json()["id"] == first["id"]
    assert len(payments_provider.transactions()) == 1


def test_a_key_reused_with_a_different_body_is_refused_with_409(payments_provider):
    charge(payments_provider, "key-1")

    response = charge(payments_provider, "key-1", {**CHARGE, "amount": "10.01"})

    assert response.status_code == 409
    assert response.json()["error"]["type"] == "idempotency_key_reused"
    assert len(payments_provider.transactions()) == 1


def test_charges_without_a_key_are_each_a_new_charge(payments_provider):
    first, second = charge(payments_provider).json(), charge(payments_provider).json()

    assert first["id"] != second["id"]
    assert first["idempotency_key"] is None


def test_concurrent_requests_with_one_key_create_exactly_one_charge(payments_provider):
    statuses: list[int] = []
    ids: set[str] = set()

    def post() -> None:
        response = charge(payments_provider, "key-race")
        statuses.append(response.status_code)
        ids.add(response.json()["id"])

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200] * 7 + [201]
    assert len(ids) == 1
    assert len(payments_provider.transactions()) == 1


def test_invalid_charges_are_refused_with_400_and_nothing_is_stored(payments_provider):
    invalid = [
        {"currency": "EUR", "account": "acct_42"},
        {**CHARGE, "amount": "0.00"},
        {**CHARGE, "amount": -5},
        {**CHARGE, "amount": "ten"},
        {**CHARGE, "amount": "10.001"},
        {**CHARGE, "amount": True},
        {**CHARGE, "amount": None},
        {**CHARGE, "currency": "EURO"},
        {**CHARGE, "currency": 978},
        {"amount": "10.00", "currency": "EUR"},
        {**CHARGE, "card_number": "4242424242424242"},
        [CHARGE],
    ]
    for body in invalid:
        response = charge(payments_provider, "key-1", body)
        assert response.status_code == 400, body
        assert response.json()["error"]["type"] == "invalid_request", body
    not_json = payments_provider.http.post("/charges", content=b'{"amount": 1,')
    assert not_json.status_code == 400
    # Three decimals as a JSON number must be refused, not rounded by a float.
    raw = b'{"amount": 10.005, "currency": "EUR", "account": "acct_42"}'
    rounded = payments_provider.http.post("/charges", content=raw)
    assert rounded.status_code == 400

    assert payments_provider.transactions() == []
    # A refused request does not burn its key.
    assert charge(payments_provider, "key-1").status_code == 201


def test_a_charge_can_be_looked_up_by_id_and_by_idempotency_key(payments_provider):
    created = charge(payments_provider, "key-1").json()
    charge(payments_provider, "key-2")

    by_id = get(payments_provider, f"/charges/{created['id']}")
    by_key = get(payments_provider, "/charges?idempotency_key=key-1")
    by_unknown_key = get(payments_provider, "/charges?idempotency_key=never-used")

    assert by_id.status_code == 200
    assert by_id.json() == created
    assert by_key.json()["object"] == "list"
    assert by_key.json()["data"] == [created]
    assert by_unknown_key.json()["data"] == []
    assert get(payments_provider, "/charges?idempotency_key=").json()["data"] == []
    assert get(payments_provider, "/charges/ch_missing").status_code == 404


# --- Refunds and balance --------------------------------------------------------------------


def test_refunds_are_idempotent_and_cannot_exceed_the_charge(payments_provider):
    charged = charge(payments_provider, "key-1").json()

    first = refund(payments_provider, "refund-1", {"charge": charged["id"], "amount": "4.00"})
    again = refund(payments_provider, "refund-1", {"charge": charged["id"], "amount": "4.00"})
    too_much = refund(payments_provider, "refund-2", {"charge": charged["id"], "amount": "6.01"})
    the_rest = refund(payments_provider, "refund-3", {"charge": charged["id"]})
    nothing_left = refund(payments_provider, "refund-4", {"charge": charged["id"]})

    assert first.status_code == 201
    assert first.json()["id"].startswith("re_")
    assert first.json()["amount"] == "4.00"
    assert first.json()["currency"] == "EUR"
    assert first.json()["status"] == "succeeded"
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert too_much.status_code == 400
    assert the_rest.status_code == 201
    assert the_rest.json()["amount"] == "6.00"
    assert nothing_left.status_code == 400
    assert get(payments_provider, f"/refunds/{first.json()['id']}").json() == first.json()
    assert get(payments_provider, "/refunds?idempotency_key=refund-3").json()["data"] == [
        the_rest.json()
    ]
    now = get(payments_provider, f"/charges/{charged['id']}").json()
    assert (now["amount_refunded"], now["refunded"]) == ("10.00", True)


def test_a_refund_of_an_unknown_charge_is_404(payments_provider):
    response = refund(payments_provider, "refund-1", {"charge": "ch_missing"})

    assert response.status_code == 404
    assert payments_provider.transactions() == []


def test_the_balance_is_charges_minus_refunds_per_currency_to_the_cent(payments_provider):
    first = charge(payments_provider, "a").json()
    charge(payments_provider, "b", {**CHARGE, "amount": "0.10"})
    charge(payments_provider, "c", {**CHARGE, "amount": "0.20"})
    charge(payments_provider, "d", {**CHARGE, "amount": 3, "currency": "usd"})
    refund(payments_provider, "r", {"charge": first["id"], "amount": "2.25"})

    balance = get(payments_provider, "/balance").json()

    assert balance["available"] == {"EUR": "8.05", "USD": "3.00"}
    assert (balance["charges"], balance["refunds"]) == (4, 1)


# --- Asynchronous confirmation and webhooks -------------------------------------------------


class Receiver:
    """A stand-in for the ledger's webhook endpoint: records deliveries, answers as told."""

    def __init__(self) -> None:
        self.deliveries: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        self.statuses: list[int] = []  # answers to give, in order; 200 once used up
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.deliveries.put((dict(self.headers), body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1/webhooks/sandbox-pay"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def next(self, timeout: float = 10) -> tuple[dict[str, str], bytes]:
        return self.deliveries.get(timeout=timeout)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def async_payments(start: StartSandbox, receiver: Receiver, delay: str = "0.2") -> SandboxProvider:
    return start(
        "payments",
        "--async-mode",
        "--async-delay",
        delay,
        "--webhook-url",
        receiver.url,
        "--webhook-secret",
        SECRET,
    )


def assert_signed(headers: dict[str, str], body: bytes) -> None:
    parts = dict(part.split("=", 1) for part in headers["X-Ledger-Signature"].split(","))
    expected = hmac.new(
        SECRET.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(parts["v1"], expected)
    assert abs(int(parts["t"]) - time.time()) < 60


def test_async_mode_answers_pending_then_sends_a_correctly_signed_webhook(start_sandbox, receiver):
    provider = async_payments(start_sandbox, receiver)

    response = charge(provider, "key-1")
    headers, body = receiver.next()

    assert response.status_code == 202
    assert response.json()["status"] == "pending"
    assert_signed(headers, body)
    event = json.loads(body)
    assert event["idempotency_key"] == "key-1"
    assert event["status"] == "confirmed"
    assert event["provider_ref"] == response.json()["id"]
    assert event["response"]["status"] == "succeeded"
    assert get(provider, f"/charges/{event['provider_ref']}").json()["status"] == "succeeded"
    assert provider.wait_for(lambda: provider.webhooks()[0]["status"] == "delivered")


def test_a_request_can_ask_for_asynchronous_confirmation_by_header(start_sandbox, receiver):
    provider = start_sandbox(
        "payments",
        "--async-delay",
        "0.1",
        "--webhook-url",
        receiver.url,
        "--webhook-secret",
        SECRET,
    )

    response = charge(provider, "key-1", **{"X-Sandbox-Async": "1"})

    assert response.status_code == 202
    assert json.loads(receiver.next()[1])["provider_ref"] == response.json()["id"]


def test_a_webhook_answered_with_503_is_retried_until_accepted(start_sandbox, receiver):
    receiver.statuses = [503]
    provider = async_payments(start_sandbox, receiver, delay="0")

    charge(provider, "key-1")
    first_headers, first_body = receiver.next()
    second_headers, second_body = receiver.next()

    assert first_body == second_body
    # A new timestamp, hence a new signature the ledger has not seen.
    assert first_headers["X-Ledger-Signature"] != second_headers["X-Ledger-Signature"]
    assert_signed(second_headers, second_body)
    [delivery] = provider.wait_for(
        lambda: [d for d in provider.webhooks() if d["status"] == "delivered"]
    )
    assert delivery["attempts"] == 2


def test_a_pending_charge_is_confirmed_and_announced_after_the_provider_restarts(
    start_sandbox, receiver
):
    provider = async_payments(start_sandbox, receiver, delay="0.5")
    pending = charge(provider, "key-1").json()
    provider.kill()

    provider.restart()

    event = json.loads(receiver.next()[1])
    assert event["provider_ref"] == pending["id"]
    assert get(provider, f"/charges/{pending['id']}").json()["status"] == "succeeded"


# --- Faults ---------------------------------------------------------------------------------


def test_a_dropped_response_is_a_connection_error_but_the_charge_exists(payments_provider):
    started = time.monotonic()
    with pytest.raises(httpx.TransportError):
        charge(payments_provider, "key-1", **{"X-Sandbox-Fault": "drop"})

    assert time.monotonic() - started < 2, "the client must see the connection close, not hang"
    [stored] = payments_provider.transactions()
    assert stored["idempotency_key"] == "key-1"
    found = get(payments_provider, "/charges?idempotency_key=key-1").json()["data"]
    assert [c["id"] for c in found] == [stored["id"]]


def test_a_5xx_fault_answers_before_anything_is_stored(payments_provider):
    unavailable = charge(payments_provider, "key-1", **{"X-Sandbox-Fault": "fail5xx"})
    server_error = charge(payments_provider, "key-1", **{"X-Sandbox-Fault": "fail5xx=500"})

    assert unavailable.status_code == 503
    assert server_error.status_code == 500
    assert "error" in unavailable.json()
    assert payments_provider.transactions() == []
    assert charge(payments_provider, "key-1").status_code == 201


def test_a_hang_times_the_client_out_but_the_charge_is_made_anyway(payments_provider):
    with pytest.raises(httpx.TimeoutException):
        payments_provider.http.post(
            "/charges",
            json=CHARGE,
            headers={"Idempotency-Key": "key-1", "X-Sandbox-Fault": "hang=0.6"},
            timeout=0.2,
        )

    assert payments_provider.transactions() == []
    stored = payments_provider.wait_for(payments_provider.transactions)
    assert [t["idempotency_key"] for t in stored] == ["key-1"]


def test_latency_delays_the_answer(payments_provider):
    started = time.monotonic()
    response = charge(payments_provider, "key-1", **{"X-Sandbox-Fault": "latency=300"})

    assert response.status_code == 201
    assert time.monotonic() - started >= 0.3


def test_ignoring_keys_makes_a_charge_per_post_and_lookups_that_do_not_echo_the_key(
    payments_provider,
):
    payments_provider.set_faults(ignore_keys=True)

    first = charge(payments_provider, "key-1")
    second = charge(payments_provider, "key-1")
    charge(payments_provider, "key-other")
    lookup = get(payments_provider, "/charges?idempotency_key=key-1").json()

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] != second.json()["id"]
    assert "Idempotency-Key" not in first.headers
    assert "idempotency_key" not in first.json()
    # The filter is ignored: every recent charge, none of them saying which key it had.
    assert len(lookup["data"]) == 3
    assert all("idempotency_key" not in found for found in lookup["data"])
    stored = payments_provider.transactions()
    assert [t["idempotency_key"] for t in stored] == [None, None, None]
    assert [t["received_idempotency_key"] for t in stored] == ["key-1", "key-1", "key-other"]


def test_a_reference_only_provider_charges_again_for_a_repeated_key_and_lists_both(
    start_sandbox,
):
    provider = start_sandbox("payments", "--reference-only")

    first = charge(provider, "key-1")
    second = charge(provider, "key-1")
    charge(provider, "key-other")
    listed = get(provider, "/charges?idempotency_key=key-1").json()
    nothing = get(provider, "/charges?idempotency_key=key-none").json()

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] != second.json()["id"]
    # Not an idempotency key to this provider: it is not echoed as one, never replayed.
    assert "Idempotency-Key" not in second.headers
    assert "Idempotent-Replayed" not in second.headers
    # The search is by reference and complete: both charges, newest first, each echoing it.
    assert [c["id"] for c in listed["data"]] == [second.json()["id"], first.json()["id"]]
    assert [c["idempotency_key"] for c in listed["data"]] == ["key-1", "key-1"]
    assert listed["has_more"] is False
    assert nothing["data"] == []


def test_a_reference_only_provider_searches_a_metadata_reference_too(start_sandbox):
    provider = start_sandbox("payments")
    provider.set_faults(reference_only=True)

    charge(provider, body={**CHARGE, "metadata": {"reference": "order-7"}})
    listed = get(provider, "/charges?idempotency_key=order-7").json()

    assert len(listed["data"]) == 1
    assert listed["data"][0]["idempotency_key"] == "order-7"


def test_garbage_makes_a_lookup_answer_200_with_a_body_that_is_not_json(payments_provider):
    created = charge(payments_provider, "key-1").json()

    response = get(payments_provider, f"/charges/{created['id']}", **{"X-Sandbox-Fault": "garbage"})

    assert response.status_code == 200
    with pytest.raises(ValueError):
        json.loads(response.content)


def test_wrong_types_make_a_lookup_answer_json_with_mistyped_fields(payments_provider):
    charge(payments_provider, "key-1")

    response = get(
        payments_provider, "/charges?idempotency_key=key-1", **{"X-Sandbox-Fault": "wrong_types"}
    )

    [found] = response.json()["data"]
    assert response.status_code == 200
    assert found["amount"] is True
    assert isinstance(found["id"], int)


def test_process_wide_faults_can_spare_lookups_and_are_cleared_by_reset(payments_provider):
    payments_provider.set_faults(drop=True, methods=("POST",))

    with pytest.raises(httpx.TransportError):
        charge(payments_provider, "key-1")
    lookup = get(payments_provider, "/charges?idempotency_key=key-1")
    payments_provider.reset()

    assert len(lookup.json()["data"]) == 1
    assert payments_provider.transactions() == []
    assert charge(payments_provider, "key-1").status_code == 201


def test_an_unknown_fault_name_is_refused_with_400(payments_provider):
    response = charge(payments_provider, "key-1", **{"X-Sandbox-Fault": "explode"})

    assert response.status_code == 400
    assert payments_provider.transactions() == []


def test_a_seeded_drop_rate_drops_the_same_requests_on_every_run(start_sandbox):
    provider = start_sandbox("payments", "--drop-rate", "0.5", "--seed", "7")

    def run() -> list[bool]:
        dropped = []
        for n in range(8):
            try:
                charge(provider, f"key-{n}")
                dropped.append(False)
            except httpx.TransportError:
                dropped.append(True)
        return dropped

    first = run()
    assert len(provider.transactions()) == 8  # a drop loses the answer, never the charge
    provider.reset()  # rewinds the dice to the seed
    second = run()

    assert first == second
    assert True in first and False in first


# --- Durability -----------------------------------------------------------------------------


def test_a_charge_survives_a_sigkill_right_after_its_201(payments_provider):
    created = charge(payments_provider, "key-1").json()
    payments_provider.kill()

    payments_provider.restart()

    assert get(payments_provider, f"/charges/{created['id']}").json() == created
    assert charge(payments_provider, "key-1").json()["id"] == created["id"]


# --- The management command -----------------------------------------------------------------


def test_the_management_command_serves_until_sigterm(tmp_path: Path):
    store = str(tmp_path / "messaging.sqlite3")
    argv = [sys.executable, "manage.py", "sandbox", "messaging", "--port", "0", "--store", store]
    with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], 15)
            line = process.stdout.readline() if ready else ""
            assert line.startswith("sandbox messaging listening on http://127.0.0.1:"), line
            health = httpx.get(f"{line.split()[-1]}/_sandbox/health", trust_env=False)
            assert health.json()["provider"] == "messaging"

            process.send_signal(signal.SIGTERM)

            assert process.wait(timeout=5) == 0
        finally:
            if process.poll() is None:
                process.kill()
