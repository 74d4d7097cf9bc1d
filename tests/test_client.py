"""The Python client (client/ledger_client) against the real ledger over HTTP (live_server)
and the sandbox payments provider as a subprocess."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.db import connection
from ledger_client import (
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectHandle,
    LeaseLost,
    Ledger,
    LedgerUnavailable,
    NeedsReview,
    OutcomeMissing,
    bind_step,
    current_effect,
    guarded,
)

from ledger.containment.keys import issue_key
from ledger.models import Agent, Tool
from ledger.models import Effect as EffectRow
from tests.factories import CHARGE
from tests.helpers import expire_lease

pytestmark = pytest.mark.django_db(transaction=True)

MakeLedger = Callable[..., Ledger]


@pytest.fixture
def make_ledger(live_server, tools, payments_provider) -> MakeLedger:
    Tool.objects.filter(name="charge_card").update(
        reconciler_config={"base_url": payments_provider.url}
    )
    key = issue_key(Agent.objects.create(name="executor"))
    opened: list[Ledger] = []

    def make(owner: str = "worker-1", **options: Any) -> Ledger:
        ledger = Ledger(live_server.url, key, owner=owner, **options)
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(make_ledger) -> Ledger:
    return make_ledger()


def charge(
    provider, e: EffectHandle, *, fault: str | None = None, timeout: float = 5.0
) -> dict[str, Any]:
    """The agent's provider call: POST /charges with the effect's idempotency key."""
    headers = {"Idempotency-Key": e.idempotency_key}
    if fault:
        headers["X-Sandbox-Fault"] = fault
    with httpx.Client(base_url=provider.url, timeout=timeout, trust_env=False) as http:
        response = http.post("/charges", json=CHARGE, headers=headers)
    response.raise_for_status()
    return response.json()


def status_of(effect_id: str) -> str:
    return EffectRow.objects.get(id=effect_id).status


@dataclass(eq=False)
class Timer:
    seconds: float
    due: float
    action: Callable[[], bool]


class ManualClock:
    """A `ledger_client.Clock` whose time moves only in `advance`, which runs every heartbeat
    falling due in the test's own thread: when it returns, each beat has had its answer."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[Timer] = []

    def every(self, seconds: float, action: Callable[[], bool], name: str) -> Callable[[], None]:
        timer = Timer(seconds, self.now + seconds, action)
        self.timers.append(timer)

        def stop() -> None:
            if timer in self.timers:
                self.timers.remove(timer)

        return stop

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in list(self.timers):
            while timer in self.timers and timer.due <= self.now:
                timer.due += timer.seconds
                if not timer.action():
                    self.timers.remove(timer)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def lease_runs_down(effect_id: str, seconds: float) -> None:
    """`seconds` pass for the lease by the database clock: its expiry comes that much closer."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect "
            "SET lease_expires_at = lease_expires_at - make_interval(secs => %s) WHERE id = %s",
            [seconds, effect_id],
        )


def test_it_confirms_a_charge_made_with_the_effects_idempotency_key(ledger, payments_provider):
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        assert not e.replayed and e.attempt == 1
        result = charge(payments_provider, e)
        e.confirm(result["id"], result)

    row = EffectRow.objects.get(id=e.id)
    assert (row.status, row.provider_ref) == ("confirmed", result["id"])
    [made] = payments_provider.transactions()
    assert made["idempotency_key"] == e.idempotency_key


def test_a_second_run_of_the_same_step_replays_and_does_not_call_the_provider(
    ledger, payments_provider
):
    calls: list[str] = []

    @guarded(tool="charge_card", target="acct_42", ledger=ledger)
    def pay(amount: str, currency: str, account: str) -> dict[str, Any]:
        e = current_effect()
        calls.append(e.idempotency_key)
        return charge(payments_provider, e)

    with bind_step(run_id="run-1", call_id="pay"):
        first = pay(**CHARGE)
        second = pay(**CHARGE)

    assert len(calls) == 1
    assert second["id"] == first["id"]
    assert len(payments_provider.transactions()) == 1
    # The function's arguments were the request, and its return value was confirmed by "id".
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        assert e.replayed and e.result["id"] == first["id"]
    assert EffectRow.objects.get(id=e.id).provider_ref == first["id"]


def test_fail_records_a_refusal_and_the_effect_key_cannot_run_again(ledger):
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        e.fail("card_declined")
    assert status_of(e.id) == "failed"

    with (
        pytest.raises(EffectClosed, match="already ended failed"),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE),
    ):
        pytest.fail("a failed effect must not run again")


def test_unknown_and_awaiting_are_recorded_as_reported(ledger):
    with ledger.effect("run-1", "a", "charge_card", "acct_42", CHARGE) as a:
        a.unknown("the provider answered garbage")
    with ledger.effect("run-1", "b", "charge_card", "acct_42", CHARGE) as b:
        b.awaiting(provider_ref="ch_pending")
    assert status_of(a.id) == "unknown"
    assert status_of(b.id) == "awaiting_confirmation"
    assert EffectRow.objects.get(id=b.id).provider_ref == "ch_pending"


def test_not_sent_returns_the_effect_to_planned_and_the_next_run_is_a_new_attempt(ledger):
    with (
        pytest.raises(ValueError),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e,
    ):
        e.not_sent("amount failed local validation")
        raise ValueError("bad amount")
    assert status_of(e.id) == "planned"

    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as again:
        assert (again.id, again.attempt) == (e.id, 2)
        again.confirm("ch_1")


def test_a_provider_timeout_is_unknown_never_failed(ledger, payments_provider):
    with (
        pytest.raises(httpx.TimeoutException),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e,
    ):
        charge(payments_provider, e, fault="hang=3", timeout=1.0)

    row = EffectRow.objects.get(id=e.id)
    assert row.status == "unknown"
    assert row.error["exception"] == "ReadTimeout" and row.error["transport"] is True
    # The provider finishes the charge after the client gave up: it did happen.
    assert payments_provider.wait_for(payments_provider.transactions, timeout=5)


def test_a_dropped_provider_response_is_unknown(ledger, payments_provider):
    with (
        pytest.raises(httpx.TransportError),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e,
    ):
        charge(payments_provider, e, fault="drop")

    assert status_of(e.id) == "unknown"
    assert len(payments_provider.transactions()) == 1


def test_any_other_exception_is_unknown_too_because_the_provider_may_have_acted(ledger):
    with (
        pytest.raises(KeyError),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e,
    ):
        raise KeyError("id")
    row = EffectRow.objects.get(id=e.id)
    assert row.status == "unknown" and row.error["transport"] is False


def test_a_clean_exit_without_an_outcome_is_unknown_and_raises(ledger):
    with (
        pytest.raises(OutcomeMissing, match="recorded as unknown"),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e,
    ):
        pass
    assert status_of(e.id) == "unknown"


def test_a_dependent_effect_is_blocked_until_its_upstream_is_confirmed(ledger):
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as pay:
        with (
            pytest.raises(Blocked, match=str(pay.id)) as blocked,
            ledger.effect(
                "run-1", "notify", "send_email", "user@example.com", {}, depends_on=[pay.id]
            ),
        ):
            pytest.fail("a blocked effect must not run")
        waiting = [(b.id, b.status) for b in blocked.value.blocked_by]
        assert waiting == [(pay.id, "dispatching")]
        pay.confirm("ch_1")

    with ledger.effect(
        "run-1", "notify", "send_email", "user@example.com", {}, depends_on=[pay.id]
    ) as notify:
        notify.confirm("msg_1")


def test_attempts_exhausted_once_every_attempt_was_used(ledger):
    for _ in range(3):
        with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
            e.not_sent("429 before sending")
    with (
        pytest.raises(AttemptsExhausted, match="all 3 attempts"),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE),
    ):
        pytest.fail("no attempts are left")


def test_an_unknown_effect_needs_review_rather_than_running_again(ledger):
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        e.unknown("timeout")
    with (
        pytest.raises(NeedsReview, match="outcome is unknown") as refused,
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE),
    ):
        pytest.fail("an unknown effect must not run again")
    assert refused.value.status == "unknown"


def test_an_effect_another_worker_holds_cannot_be_run_twice(make_ledger):
    first, second = make_ledger("executor-1"), make_ledger("executor-2")
    with first.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        with (
            pytest.raises(NeedsReview, match="dispatching under another claim"),
            second.effect("run-1", "pay", "charge_card", "acct_42", CHARGE),
        ):
            pytest.fail("one owner per effect")
        e.confirm("ch_1")


def test_an_outcome_after_the_lease_expired_raises_lease_lost(ledger):
    with (
        pytest.raises(LeaseLost, match="late outcome"),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e,
    ):
        expire_lease(e.id)
        e.confirm("ch_1")
    assert status_of(e.id) == "dispatching"


def test_a_refused_heartbeat_marks_the_lease_lost(make_ledger, clock):
    ledger = make_ledger(lease_seconds=30, clock=clock)  # a beat every 10 seconds
    with (
        pytest.raises(LeaseLost, match="heartbeat was refused"),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e,
    ):
        expire_lease(e.id)
        clock.advance(9)
        assert not e.lease_lost
        clock.advance(1)
        assert e.lease_lost
        e.confirm("ch_1")


def test_heartbeats_keep_a_lease_alive_past_its_original_expiry(make_ledger, clock):
    ledger = make_ledger(lease_seconds=30, clock=clock)  # a beat every 10 seconds
    with ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE) as e:
        for _ in range(4):  # 40 seconds: the 30-second lease would have run out
            lease_runs_down(e.id, 10)
            clock.advance(10)
        assert not e.lease_lost
        e.confirm("ch_1")
    assert status_of(e.id) == "confirmed"


def test_recovery_at_start_up_returns_the_plan(ledger):
    with ledger.effect("run-1", "retry", "charge_card", "acct_42", CHARGE) as e:
        e.not_sent("429 before sending")
    # A worker that crashed mid-call: claimed, never reported, lease run out.
    crashed = ledger.effect("run-1", "crashed", "charge_card", "acct_42", CHARGE).__enter__()
    crashed.stop_heartbeat()
    expire_lease(crashed.id)
    with ledger.effect("run-1", "done", "charge_card", "acct_42", CHARGE) as done:
        done.confirm("ch_1")

    plan = ledger.recover("run-1", dry_run=True)

    actions = {item.effect.id: item.action for item in plan}
    assert actions == {e.id: "retry_safe", crashed.id: "reconcile"}
    assert [item.effect.step_id for item in plan.retry_safe] == ["retry"]
    assert plan.counts_by_status == {"planned": 1, "dispatching": 1}


def test_recover_follows_the_pages_to_the_last(ledger, settings):
    settings.LEDGER_RECOVERY_LIMIT = 2  # pages of two
    for n in range(5):
        ledger.record_intent("run-1", f"step-{n}", "charge_card", "acct_42", CHARGE)

    plan = ledger.recover("run-1", dry_run=True)

    assert [item.effect.step_id for item in plan] == [f"step-{n}" for n in range(5)]
    assert plan.next_cursor is None and plan.counts_by_status == {"planned": 5}


def test_an_unreachable_ledger_is_reported_after_the_retries(tools):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port any more: every connection is refused at once.
    ledger = Ledger(f"http://127.0.0.1:{port}", "elk_none", owner="w", retries=1)
    with (
        ledger,
        pytest.raises(LedgerUnavailable, match="after 2 tries"),
        ledger.effect("run-1", "pay", "charge_card", "acct_42", CHARGE),
    ):
        pytest.fail("nothing was claimed")
