"""The client's own calls to the ledger are retried safely: a reply lost on the way back (the
ledger committed, the client never heard) or a 503 is repeated with the same body, and the
ledger's repeat semantics make the repeat change nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from ledger_client import Ledger

from ledger.models import Agent, EffectEvent
from ledger.models import Effect as EffectRow
from ledger.policy.agentkeys import issue_key

pytestmark = pytest.mark.django_db(transaction=True)

CHARGE = {"amount": "10.00", "currency": "EUR", "account": "acct_42"}


class FlakyProxy(ThreadingHTTPServer):
    """A real HTTP hop in front of the ledger that loses replies on request.

    `lose("POST", "/outcome")`: the next matching request reaches the ledger, but its answer is
    thrown away and the connection closed. `refuse(...)`: the next one gets a 503 and never
    reaches the ledger.
    """

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = httpx.Client(base_url=upstream, trust_env=False, timeout=10)
        self.faults: list[tuple[str, str, str]] = []
        self.seen: list[str] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def lose(self, method: str, path_end: str) -> None:
        self.faults.append(("lose", method, path_end))

    def refuse(self, method: str, path_end: str) -> None:
        self.faults.append(("refuse", method, path_end))

    def fault_for(self, method: str, path: str) -> str | None:
        with self.lock:
            self.seen.append(f"{method} {path}")
            for fault in self.faults:
                if fault[1] == method and path.endswith(fault[2]):
                    self.faults.remove(fault)
                    return fault[0]
        return None


class _Forward(BaseHTTPRequestHandler):
    server: FlakyProxy

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fault = self.server.fault_for(self.command, self.path)
        if fault == "refuse":
            self.send_error(503)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() in _PASSED}
        answer = self.server.upstream.request(
            self.command, self.path, content=body, headers=headers
        )
        if fault == "lose":
            self.close_connection = True
            return
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, format: str, *args: object) -> None:
        return None


_PASSED = {"authorization", "content-type"}


@pytest.fixture
def proxy(live_server) -> Iterator[FlakyProxy]:
    server = FlakyProxy(live_server.url)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    server.upstream.close()


@pytest.fixture
def ledger(proxy, tools) -> Iterator[Ledger]:
    key = issue_key(Agent.objects.create(name="executor"))
    with Ledger(proxy.url, key, owner="worker-1") as ledger:
        yield ledger


def test_a_claim_whose_reply_was_lost_continues_with_the_same_lease(ledger, proxy):
    proxy.lose("POST", "/api/v1/effects")
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        assert e.attempt == 1
        e.confirm("ch_1")

    assert proxy.seen.count("POST /api/v1/effects") == 2
    row = EffectRow.objects.get(id=e.id)
    assert (row.status, row.attempt) == ("confirmed", 1)
    assert EffectEvent.objects.filter(effect_id=e.id, reason="claimed").count() == 1


def test_an_outcome_whose_reply_was_lost_is_repeated_harmlessly(ledger, proxy):
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        proxy.lose("POST", "/outcome")
        e.confirm("ch_1", {"id": "ch_1"})

    assert proxy.seen.count(f"POST /api/v1/effects/{e.id}/outcome") == 2
    assert EffectRow.objects.get(id=e.id).status == "confirmed"


def test_a_503_from_the_ledger_is_retried(ledger, proxy):
    proxy.refuse("POST", "/api/v1/effects")
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        e.confirm("ch_1")
    assert EffectRow.objects.get(id=e.id).status == "confirmed"
