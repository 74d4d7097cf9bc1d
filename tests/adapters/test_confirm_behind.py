"""Confirmations written behind (`ledger_client.behind`, ADR 0023): a guarded call's result
goes back while its `confirmed` outcome is sent on a background thread. Seen from the same
client nothing overtakes it; closing the client and the interpreter's exit wait for it; a
process that dies before it arrives leaves the effect to the ledger's recovery, which finds the
one charge; a confirmation the ledger refuses is logged and counted, never raised."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from typing import Any

import httpx
import pytest
from ledger_client import AsyncLedger, Ledger, bind_position, bind_step, current_effect, guarded
from ledger_client.behind import Reporter
from ledger_client.holders import process_owner
from ledger_client.protocol import Call

from ledger.models import Effect
from ledger.models.states import Status
from tests.adapters.conftest import AGENTS

pytestmark = pytest.mark.django_db(transaction=True)


def _charge(stage: Any, account: str) -> dict[str, Any]:
    response = httpx.post(
        f"{stage.payments.url}/charges",
        json={"amount": "3.00", "currency": "EUR", "account": account},
        headers={"Idempotency-Key": current_effect().idempotency_key},
        timeout=5,
        trust_env=False,
    )
    response.raise_for_status()
    return response.json()


def hold(reporter: Reporter) -> threading.Event:
    """Hold the reporter's requests back until the event is set, as a slow network would: the
    confirmation is still on the way when the tool has returned."""
    release, send = threading.Event(), reporter._send
    reporter._send = lambda call: (release.wait(20), send(call))[1]  # type: ignore[method-assign]
    return release


def _pay(stage: Any, ledger: Ledger | AsyncLedger, calls: list[str], **options: Any):
    if isinstance(ledger, AsyncLedger):

        @guarded(tool="charge_card", target="{account}", ledger=ledger, **options)
        async def apay(account: str) -> dict[str, Any]:
            calls.append(account)
            return await asyncio.to_thread(_charge, stage, account)

        return apay

    @guarded(tool="charge_card", target="{account}", ledger=ledger, **options)
    def pay(account: str) -> dict[str, Any]:
        calls.append(account)
        return _charge(stage, account)

    return pay


def _status(run_id: str) -> str:
    return Effect.objects.get(run_id=run_id).status


def test_the_tool_returns_before_its_confirmation_and_nothing_of_the_client_overtakes_it(stage):
    calls: list[str] = []
    with Ledger(stage.url, stage.key, owner="behind-test", retries=1) as ledger:
        release = hold(ledger.transport.behind)
        pay = _pay(stage, ledger, calls)
        with bind_step("run-behind", "call-1"):
            charge = pay("acct_b")
        # Returned with the charge; the ledger has not heard yet.
        assert ledger.transport.behind.pending == 1 and _status("run-behind") == Status.DISPATCHING
        threading.Timer(0.3, release.set).start()
        # The client's next request goes out after the confirmation, whatever it is.
        [seen] = ledger.list_effects(run_id="run-behind").items
        assert seen.status == "confirmed" and seen.provider_ref == charge["id"]
        with bind_step("run-behind", "call-1"):  # the same call again: the recorded result
            assert pay("acct_b")["id"] == charge["id"]
    assert calls == ["acct_b"] and len(stage.charges()) == 1
    assert ledger.transport.behind.failed == []


def test_confirm_behind_false_confirms_before_the_tool_returns(stage):
    with Ledger(stage.url, stage.key, owner="behind-test", retries=1) as ledger:
        hold(ledger.transport.behind)  # would hold a confirmation back: none is handed over
        with bind_step("run-waits", "call-1"):
            _pay(stage, ledger, [], confirm_behind=False)("acct_w")
        assert _status("run-waits") == Status.CONFIRMED
        assert ledger.transport.behind.pending == 0


def test_the_async_guard_writes_behind_and_closing_the_client_waits(stage):
    calls: list[str] = []

    async def main() -> tuple[str, str]:
        async with AsyncLedger(stage.url, stage.key, owner="behind-async", retries=1) as ledger:
            release = hold(ledger.transport.behind)
            with bind_step("run-async", "call-1"):
                charge = await _pay(stage, ledger, calls)("acct_a")
            before = await asyncio.to_thread(_status, "run-async")
            release.set()
        return before, charge["id"]  # after `async with`: closed, so sent

    before, charge_id = asyncio.run(main())
    assert before == Status.DISPATCHING
    effect = Effect.objects.get(run_id="run-async")
    assert (effect.status, effect.provider_ref) == (Status.CONFIRMED, charge_id)
    assert calls == ["acct_a"]


def test_a_refused_confirmation_is_logged_and_counted_not_raised(stage, caplog):
    with Ledger(stage.url, stage.key, owner="behind-lost", retries=1) as ledger:
        release = hold(ledger.transport.behind)
        with bind_step("run-lost", "call-1"):
            _pay(stage, ledger, [])("acct_l")
        effect = Effect.objects.get(run_id="run-lost")
        # Meanwhile the lease is ended (as for a holder known to be gone): the token is fenced.
        with Ledger(stage.url, stage.key, owner="other", retries=1) as other:
            other.end_lease(str(effect.id), "behind-lost")
        with caplog.at_level(logging.WARNING, logger="ledger_client"):
            release.set()
            assert ledger.transport.behind.drain(20)
    [failed] = ledger.transport.behind.failed
    assert failed.effect_id == str(effect.id) and "stale_lease" in failed.error
    assert "the ledger's recovery will ask the provider" in caplog.text
    assert _status("run-lost") == Status.DISPATCHING  # for recovery, as after a crash


def test_the_interpreters_exit_waits_for_the_confirmation(stage):
    done = stage.run_python(AGENTS / "confirms_behind.py", "run-exit", "acct_e", "exit")
    assert done.returncode == 0, done.stderr[-2000:]
    effect = Effect.objects.get(run_id="run-exit")
    assert (effect.status, effect.provider_ref) == (Status.CONFIRMED, done.stdout.strip())


def test_a_process_killed_before_its_confirmation_arrives_leaves_one_charge_to_recovery(
    stage, ledger_worker
):
    died = stage.run_python(
        AGENTS / "confirms_behind.py",
        *("run-killed", "acct_k", "killed"),
        EFFECT_LEDGER_OWNER="",
        EFFECT_LEDGER_LEASE_SECONDS="600",
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    charge_id = died.stdout.strip()  # the tool had returned it
    assert _status("run-killed") == Status.DISPATCHING
    # The run resumed: the same call (the script's tool, its arguments), in a new process.
    with Ledger(stage.url, stage.key, owner=process_owner(), retries=1) as ledger:

        @guarded(tool="charge_card", target="{account}", ledger=ledger, settle_timeout=30)
        def pay(account: str, amount: str, currency: str = "EUR") -> dict[str, Any]:
            raise AssertionError("the charge was made before the crash: it must not run again")

        with bind_position("run-killed", "turn-1"):
            again = pay("acct_k", "25.00")
    assert again["id"] == charge_id
    effect = Effect.objects.get(run_id="run-killed")
    assert (effect.status, effect.provider_ref) == (Status.CONFIRMED, charge_id)
    assert [c["id"] for c in stage.charges()] == [charge_id]


def test_closing_the_client_sends_what_it_holds_and_ends_its_thread(stage):
    ledger = Ledger(stage.url, stage.key, owner="behind-close", retries=1)
    release = hold(ledger.transport.behind)
    with bind_step("run-close", "call-1"):
        _pay(stage, ledger, [])("acct_c")
    thread = ledger.transport.behind._thread
    assert thread is not None and thread.is_alive()
    threading.Timer(0.3, release.set).start()
    ledger.close()
    assert not thread.is_alive() and ledger.transport.behind.pending == 0
    assert _status("run-close") == Status.CONFIRMED


def test_a_forked_child_holds_nothing_of_its_parents_confirmations():
    release = threading.Event()
    reporter = Reporter(lambda call: (release.wait(10), {})[1])
    reporter.submit("effect-1", Call("POST", "/x"), lambda answer: None)
    assert reporter.pending == 1
    child = os.fork()
    if child == 0:  # the child: nothing to wait for, its parent sends it
        os._exit(0 if reporter.pending == 0 and reporter.drain(1) else 1)
    _, status = os.waitpid(child, 0)
    release.set()
    assert os.waitstatus_to_exitcode(status) == 0
    assert reporter.drain(10) and reporter.failed == []
    reporter.close()
