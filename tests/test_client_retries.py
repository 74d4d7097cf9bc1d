"""The client's own calls to the ledger are retried only where a repeat cannot do anything twice
(`ledger_client.protocol`): a connection that could not be made is retried for any call; a
reply lost on the way back (the ledger committed, the client never heard) or a 503 only for an
idempotent call, repeated with the same body so that the ledger's repeat semantics make the
repeat change nothing. Every call the client builds is idempotent; the pauses between tries are
exponential with full jitter."""

from __future__ import annotations

import dataclasses
import random
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from ledger_client import Ledger, LedgerUnavailable
from ledger_client.protocol import Call, Retry

from ledger.containment.keys import issue_key
from ledger.models import Agent, EffectEvent
from ledger.models import Effect as EffectRow

# The tests over HTTP; the rule and the backoff below need no database.
live = pytest.mark.django_db(transaction=True)

CHARGE = {"amount": "10.00", "currency": "EUR", "account": "acct_42"}


class FlakyProxy(ThreadingHTTPServer):
    """A real HTTP hop in front of the ledger that loses replies on request.

    `lose("POST", "/outcome")`: the next matching request reaches the ledger, but its answer is
    thrown away and the connection closed. `refuse(...)`: the next one gets a 503 and never
    reaches the ledger. `break_off(..., status)`: the next one reaches the ledger, and its answer
    is replaced by the 502 or 504 a front server gives when the application broke off or was
    too slow (the request may have committed).
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

    def break_off(self, method: str, path_end: str, status: int) -> None:
        self.faults.append((str(status), method, path_end))

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
        status, content = answer.status_code, answer.content
        if fault in _BROKEN_OFF:
            status, content = int(fault), _BROKEN_OFF[fault]
        self.send_response(status)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, format: str, *args: object) -> None:
        return None


_PASSED = {"authorization", "content-type"}
# The front server's own answers (config/nginx/effect-ledger.conf) when the application broke
# off after the request was sent, or did not answer in time.
_BROKEN_OFF = {
    "502": b'{"error": "upstream_lost", "detail": "The application stopped before it answered."}',
    "504": b'{"error": "upstream_timeout", "detail": "The application did not answer in time."}',
}


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
def key(tools) -> str:
    return issue_key(Agent.objects.create(name="executor"))


@pytest.fixture
def sleeps() -> list[float]:
    """The pauses the client took between tries (it is given this list's append as `sleep`)."""
    return []


@pytest.fixture
def ledger(proxy, key, sleeps) -> Iterator[Ledger]:
    with Ledger(proxy.url, key, owner="worker-1", sleep=sleeps.append) as ledger:
        yield ledger


def not_idempotent(call: Call) -> Call:
    """`call` as one built without its repeat key: a repeat might do it twice."""
    return dataclasses.replace(call, idempotent=False)


class Built(Exception):
    """Raised in place of sending: the call was built, and recorded."""


def built(use: Callable[[Ledger], object]) -> Call:
    """The call the client makes for `use(ledger)`, caught before it is sent."""
    sent: list[Call] = []

    def record(call: Call) -> dict[str, Any]:
        sent.append(call)
        raise Built

    with Ledger("http://127.0.0.1:9", "elk_none", owner="worker-1") as ledger:
        ledger.transport.send = record  # type: ignore[method-assign]
        with pytest.raises(Built):
            use(ledger)
    [call] = sent
    return call


def intent() -> Call:
    """An intent without a claim (keyed by its effect key, so idempotent as built)."""
    return built(lambda ledger: ledger.record_intent("run-1", "pay", "charge_card", "x", CHARGE))


def unreachable_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port any more: every connection is refused at once.
    return f"http://127.0.0.1:{port}"


def first_bound(attempt: int) -> float:
    """The longest pause before retry number `attempt` with the client's default `Retry`."""
    retry = Retry()
    return min(retry.cap, retry.base * 2 ** (attempt - 1))


# --- Idempotent calls: lost replies and 503s are repeated ------------------------------------


@live
def test_a_claim_whose_reply_was_lost_continues_with_the_same_lease(ledger, proxy):
    proxy.lose("POST", "/api/v1/effects")
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        assert e.attempt == 1
        e.confirm("ch_1")

    assert proxy.seen.count("POST /api/v1/effects") == 2
    row = EffectRow.objects.get(id=e.id)
    assert (row.status, row.attempt) == ("confirmed", 1)
    assert EffectEvent.objects.filter(effect_id=e.id, reason="claimed").count() == 1


@live
def test_an_outcome_whose_reply_was_lost_is_repeated_harmlessly(ledger, proxy):
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        proxy.lose("POST", "/outcome")
        e.confirm("ch_1", {"id": "ch_1"})

    assert proxy.seen.count(f"POST /api/v1/effects/{e.id}/outcome") == 2
    assert EffectRow.objects.get(id=e.id).status == "confirmed"


@live
def test_a_503_from_the_ledger_is_retried(ledger, proxy, sleeps):
    proxy.refuse("POST", "/api/v1/effects")
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        e.confirm("ch_1")
    assert EffectRow.objects.get(id=e.id).status == "confirmed"
    assert proxy.seen.count("POST /api/v1/effects") == 2
    # One pause, before the single retry, within its full-jitter range.
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= first_bound(1)


@live
def test_503s_past_the_retries_raise_ledger_unavailable(proxy, key, sleeps):
    proxy.refuse("POST", "/api/v1/effects")
    proxy.refuse("POST", "/api/v1/effects")
    with (
        Ledger(proxy.url, key, owner="worker-1", retries=1, sleep=sleeps.append) as ledger,
        pytest.raises(LedgerUnavailable, match=r"after 2 tries \(503 unavailable\)"),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE),
    ):
        pytest.fail("nothing was claimed")
    assert proxy.seen.count("POST /api/v1/effects") == 2
    assert len(sleeps) == 1
    assert not EffectRow.objects.exists()


@live
@pytest.mark.parametrize("status", [502, 504])
def test_an_outcome_answered_502_or_504_by_the_front_server_is_repeated(
    ledger, proxy, sleeps, status
):
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        proxy.break_off("POST", "/outcome", status)
        e.confirm("ch_1", {"id": "ch_1"})

    # The first outcome committed; its repeat, with the same body, changed nothing.
    assert proxy.seen.count(f"POST /api/v1/effects/{e.id}/outcome") == 2
    assert EffectRow.objects.get(id=e.id).status == "confirmed"
    assert EffectEvent.objects.filter(effect_id=e.id, to_status="confirmed").count() == 1
    assert len(sleeps) == 1


def long_poll(ledger: Ledger) -> object:
    ledger.get = lambda effect_id: SimpleNamespace(status="planned")  # type: ignore[method-assign]
    return ledger.wait_for_change("e", timeout=5)


def test_every_call_the_client_builds_is_idempotent():
    uses: list[Callable[[Ledger], object]] = [
        lambda ledger: ledger.record_intent("r", "s", "t", "x", {}),
        lambda ledger: ledger.record_intent("r", "s", "t", "x", {}, claim=True),
        lambda ledger: ledger.effect("r", "s", "t", "x", {}).__enter__(),
        lambda ledger: ledger.claim("e"),
        lambda ledger: ledger.heartbeat("e", "token"),
        lambda ledger: ledger.report("e", "token", {"status": "confirmed"}),
        lambda ledger: ledger.cancel("e", "no"),
        lambda ledger: ledger.compensate("e", reason="refund"),
        lambda ledger: ledger.get("e"),
        long_poll,
        lambda ledger: ledger.list_effects(run_id="r"),
        lambda ledger: ledger.journal("r"),
        lambda ledger: ledger.recover(dry_run=True),
        lambda ledger: ledger.health(),
    ]
    calls = [built(use) for use in uses]
    assert all(call.idempotent for call in calls)
    assert calls[9].params is not None and "wait" in calls[9].params  # the long poll
    # The repeat keys are made once per call, so that the retries of one call repeat it.
    for claim in (calls[1], calls[2], calls[3]):  # an intent with a claim, a block, a claim
        assert claim.body is not None and claim.body["claim_id"]
    # A compensation's repeat key is the ledger's fixed default (`1`) unless the caller gives
    # one, never one made up per call: asked again after a restore, it is the same refund.
    compensation = calls[7].body
    assert compensation is not None and "compensation_key" not in compensation


# --- A call without its repeat key: only a connection never made is retried ------------------


@live
def test_a_lost_reply_to_a_call_that_is_not_idempotent_is_not_repeated(ledger, proxy, sleeps):
    proxy.lose("POST", "/api/v1/effects")
    with pytest.raises(LedgerUnavailable, match="after 1 try "):
        ledger.transport.send(not_idempotent(intent()))

    # It reached the ledger once; a repeat could have done it a second time.
    assert proxy.seen.count("POST /api/v1/effects") == 1
    assert EffectRow.objects.filter(run_id="run-1", step_id="pay").count() == 1
    assert sleeps == []


@live
def test_a_503_to_a_call_that_is_not_idempotent_is_not_repeated(ledger, proxy, sleeps):
    proxy.refuse("POST", "/api/v1/effects")
    with pytest.raises(LedgerUnavailable, match=r"after 1 try \(503 unavailable\)"):
        ledger.transport.send(not_idempotent(intent()))
    assert proxy.seen.count("POST /api/v1/effects") == 1
    assert not EffectRow.objects.exists()
    assert sleeps == []


@live
def test_a_502_to_a_call_that_is_not_idempotent_is_not_repeated(ledger, proxy, sleeps):
    proxy.break_off("POST", "/api/v1/effects", 502)
    with pytest.raises(LedgerUnavailable, match=r"after 1 try \(502 upstream_lost\)"):
        ledger.transport.send(not_idempotent(intent()))
    # It reached the ledger, which recorded it: a repeat might have done it twice.
    assert proxy.seen.count("POST /api/v1/effects") == 1
    assert EffectRow.objects.filter(run_id="run-1", step_id="pay").count() == 1
    assert sleeps == []


def test_a_connection_never_made_is_retried_for_any_call():
    sleeps: list[float] = []
    with (
        Ledger(unreachable_url(), "elk_none", owner="w", retries=2, sleep=sleeps.append) as ledger,
        pytest.raises(LedgerUnavailable, match=r"after 3 tries .*ConnectError"),
    ):
        ledger.transport.send(not_idempotent(intent()))
    # Two pauses, each within its full-jitter range: [0, 0.2], then [0, 0.4].
    assert len(sleeps) == 2
    assert all(0 <= pause <= first_bound(n) for n, pause in enumerate(sleeps, start=1))


# --- The rule and the backoff, unit by unit ---------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "idempotent", "retried"),
    [
        ("connect", True, True),
        ("connect", False, True),
        ("transport", True, True),
        ("transport", False, False),
        ("unavailable", True, True),
        ("unavailable", False, False),
    ],
)
def test_what_is_retried(failure, idempotent, retried):
    retry = Retry(retries=3)
    call = dataclasses.replace(intent(), idempotent=idempotent)
    assert [retry.should_retry(call, failure, n) for n in (1, 2, 3, 4)] == [
        retried,
        retried,
        retried,
        False,  # the retries are used up
    ]


class Ceiling(random.Random):
    """Jitter that always picks the top of its range, and records the ranges asked for."""

    def __init__(self) -> None:
        super().__init__(0)
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return b


def test_the_backoff_is_exponential_with_full_jitter():
    ceiling = Ceiling()
    retry = Retry(retries=6, base=0.2, cap=3.0, jitter=ceiling)

    assert [retry.delay(n) for n in range(1, 7)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.0, 3.0])
    # Full jitter: every pause is drawn from zero up to its bound, not from near the bound.
    assert all(low == 0 for low, _ in ceiling.ranges)

    seeded = Retry(retries=3, base=0.2, cap=3.0, jitter=random.Random(42))
    pauses = [seeded.delay(3) for _ in range(200)]
    assert all(0 <= pause <= 0.8 for pause in pauses)
    assert min(pauses) < 0.1 and max(pauses) > 0.7
