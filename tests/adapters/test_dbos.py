"""The DBOS adapter (`ledger_client.adapters.dbos`, dbos 3.4) on the real stage: the ledger, the
payments sandbox, and DBOS itself on a real PostgreSQL system database
(`<DATABASE_URL's database>_sys`, created afresh for this module and dropped after it).

A crash is a real SIGKILL of a process running the workflow (tests/adapters/agents/dbos_pay.py),
after the sandbox committed the charge and before the guard could report it; a new process
launches DBOS, which recovers the pending workflow. The other tests run DBOS in this process,
launched once for the module and destroyed after it, with the workflows below.

Every step body counts its runs (`calls`): the sandbox honours idempotency keys, so one charge
at the provider alone would not show that a body ran twice.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import time
import typing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import ledger_client
import pytest
from dbos import DBOS, DBOSConfig, SetWorkflowID, WorkflowHandle
from ledger_client import (
    EffectClosed,
    LedgerUnavailable,
    LimitExceeded,
    NeedsReview,
    NotSent,
    current_effect,
)
from ledger_client.adapters.dbos import ledger_step, should_retry

from devstack.provision import database_url, drop_database
from ledger.api import longpoll
from tests.adapters.conftest import AGENTS, Stage
from tests.factories import due_now
from tests.helpers import ROOT

SCRIPT = AGENTS / "dbos_pay.py"
WAIT = 20.0  # the in-process steps' wait_timeout: a hold never resolved fails the test
calls: list[str] = []  # one entry per run of a step body in this process


# --- Steps and workflows run in this process --------------------------------------------------


def charge(amount: str, currency: str, account: str) -> dict[str, Any]:
    calls.append(amount)
    answer = httpx.post(
        f"{os.environ['SANDBOX_PAYMENTS_URL']}/charges",
        json={"amount": amount, "currency": currency, "account": account},
        headers={"Idempotency-Key": current_effect().idempotency_key},
        timeout=10,
    )
    answer.raise_for_status()
    return dict(answer.json())


@ledger_step(tool="charge_card", target="{account}", wait_timeout=WAIT)
def charge_card(amount: str, currency: str = "EUR", account: str = "acct_1") -> dict[str, Any]:
    """Charge a card through the payments sandbox."""
    return charge(amount, currency, account)


@ledger_step(tool="charge_card", target="{account}", wait_timeout=WAIT)
async def charge_card_async(
    amount: str, currency: str = "EUR", account: str = "acct_1"
) -> dict[str, Any]:
    """Charge a card through the payments sandbox, awaited."""
    calls.append(amount)
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(
            f"{os.environ['SANDBOX_PAYMENTS_URL']}/charges",
            json={"amount": amount, "currency": currency, "account": account},
            headers={"Idempotency-Key": current_effect().idempotency_key},
        )
    answer.raise_for_status()
    return dict(answer.json())


@ledger_step(tool="charge_card", target="acct_1", wait_timeout=WAIT)
def charge_with_note(amount: str, note: Any) -> dict[str, Any]:
    return charge(amount, "EUR", "acct_1")


@ledger_step(
    tool="charge_card",
    target="{account}",
    wait_timeout=WAIT,
    retries_allowed=True,
    interval_seconds=0.1,
)
def charge_and_lose_the_answer(
    amount: str, currency: str = "EUR", account: str = "acct_1"
) -> dict[str, Any]:
    charge(amount, currency, account)
    raise TimeoutError("the provider's answer was lost on its way back")


@DBOS.workflow()
def pay_and_lose_the_answer(amount: str) -> dict[str, Any]:
    return charge_and_lose_the_answer(amount)


@DBOS.workflow()
def pay(amount: str) -> dict[str, Any]:
    return charge_card(amount)


@DBOS.workflow()
async def pay_async(amount: str) -> dict[str, Any]:
    return await charge_card_async(amount)


@DBOS.workflow()
def pay_with_note(amount: str, note: Any) -> dict[str, Any]:
    return charge_with_note(amount, note)


@DBOS.step()
def outer_step(amount: str) -> dict[str, Any]:
    return charge_card(amount)


@DBOS.workflow()
def pay_from_a_step(amount: str) -> dict[str, Any]:
    return outer_step(amount)


WORKFLOWS: dict[str, Callable[..., Any]] = {"sync": pay, "async": pay_async}


# --- Fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def system_db() -> Iterator[str]:
    """DBOS's system database, empty; DBOS creates its tables on launch."""
    base = os.environ["DATABASE_URL"]
    name = f"{urlsplit(base).path.lstrip('/')}_sys"
    drop_database(base, name)
    yield database_url(base, name)
    drop_database(base, name)


@pytest.fixture(scope="module")
def dbos(system_db: str) -> Iterator[None]:
    config: DBOSConfig = {
        "name": "ledger-adapter-test",
        "system_database_url": system_db,
        # Its own version: DBOS hands a dead executor's workflows to a live one of the same
        # version, and the crash tests' processes must recover theirs themselves.
        "executor_id": f"pytest-{os.getpid()}",
        "application_version": f"pytest-{uuid.uuid4().hex}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    yield
    DBOS.destroy()


@pytest.fixture
def ledger(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Stage:
    """The stage, with this process's guarded steps pointed at its ledger and sandbox (the
    process default is put back as it was afterwards)."""
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    monkeypatch.setattr(ledger_client.config, "_default", None)
    ledger_client.configure(stage.url, stage.key, owner="dbos-pytest")
    calls.clear()
    return stage


def start(workflow: Callable[..., Any], *args: Any) -> WorkflowHandle[Any]:
    with SetWorkflowID(f"wf-{uuid.uuid4().hex[:12]}"):
        return DBOS.start_workflow(workflow, *args)


def wait_until(condition: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {condition.__doc__ or condition}")


def long_polling() -> bool:
    """a guarded step long-polls the ledger"""
    return longpoll.waiting_now() == 1


def held(stage: Stage) -> Any:
    def awaiting() -> Any:
        """the charge waits for an operator's approval"""
        effects = stage.effects("charge_card")
        return effects[0] if effects and effects[0].status == "awaiting_approval" else None

    return wait_until(awaiting)


# --- The function as it was written -------------------------------------------------------------


def plain_charge(amount: str, currency: str = "EUR", account: str = "acct_1") -> dict[str, Any]:
    """Charge a card through the payments sandbox."""
    return charge(amount, currency, account)


async def plain_charge_async(
    amount: str, currency: str = "EUR", account: str = "acct_1"
) -> dict[str, Any]:
    """Charge a card through the payments sandbox, awaited."""
    return charge(amount, currency, account)


@pytest.mark.parametrize("plain", [plain_charge, plain_charge_async], ids=["sync", "async"])
def test_the_step_keeps_the_functions_signature_annotations_and_doc(
    plain: Callable[..., Any],
) -> None:
    """DBOS builds no tool schema; what a caller, a type checker or another framework reads
    off the function is the same with and without the ledger."""
    step = ledger_step(tool="charge_card")(plain)
    assert step is not plain and inspect.unwrap(step) is plain
    # Read off the outermost wrapper itself, not by following __wrapped__ back to `plain`.
    assert inspect.signature(step, follow_wrapped=False) == inspect.signature(plain)
    assert "amount: 'str', currency: 'str' = 'EUR'" in str(inspect.signature(step))
    assert step.__annotations__ == plain.__annotations__
    assert typing.get_type_hints(step) == typing.get_type_hints(plain)
    assert (step.__doc__, step.__name__, step.__qualname__) == (
        plain.__doc__,
        plain.__name__,
        plain.__qualname__,
    )
    assert inspect.iscoroutinefunction(step) == inspect.iscoroutinefunction(plain)


# --- An operator's approval: the step waits on the ledger -----------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_held_charge_waits_in_its_step_and_runs_once_an_operator_approves(
    dbos: None, ledger: Stage, flavour: str
) -> None:
    ledger.hold_above("100.00")
    handle = start(WORKFLOWS[flavour], "250.00")
    effect = held(ledger)
    wait_until(long_polling)  # the step waits on the ledger; nothing has run
    assert handle.get_status().status == "PENDING"
    assert calls == [] and ledger.charges() == []

    ledger.approve(effect.id)
    result = handle.get_result()

    assert calls == ["250.00"]
    (charge,) = ledger.charges()
    assert result["id"] == charge["id"] and charge["amount"] == "250.00"
    (effect,) = ledger.effects("charge_card")
    assert effect.status == "confirmed" and effect.run_id == handle.get_workflow_id()
    assert charge["idempotency_key"] == effect.idempotency_key


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_rejected_charge_charges_nothing_and_ends_the_workflow_with_effect_closed(
    dbos: None, ledger: Stage, flavour: str
) -> None:
    ledger.hold_above("100.00")
    handle = start(WORKFLOWS[flavour], "250.00")
    effect = held(ledger)

    ledger.reject(effect.id)

    with pytest.raises(EffectClosed) as raised:
        handle.get_result()
    assert raised.value.status == "cancelled"
    # The same error as DBOS checkpointed it: what a recovery or another process reads back.
    with pytest.raises(EffectClosed) as recorded:
        DBOS.retrieve_workflow(handle.get_workflow_id()).get_result()
    assert recorded.value.status == "cancelled" and recorded.value.effect is not None
    assert recorded.value.effect.id == str(effect.id)
    assert calls == [] and ledger.charges() == []
    assert [e.status for e in ledger.effects("charge_card")] == ["cancelled"]


# --- DBOS's step retries -------------------------------------------------------------------------


def test_a_retried_step_whose_charge_went_through_waits_and_returns_the_recorded_charge(
    dbos: None, ledger: Stage
) -> None:
    """The body charged, then raised (its answer lost): the effect is `unknown`. DBOS retries
    the step; the retry is the same step id, so the guard finds the effect in doubt and waits
    on the ledger instead of charging again, and returns the charge the ledger settled on."""
    handle = start(pay_and_lose_the_answer, "25.00")
    wait_until(long_polling)  # the retry waits on the ledger
    (effect,) = ledger.effects("charge_card")
    assert effect.status == "unknown" and calls == ["25.00"]

    due_now(str(effect.id))  # the reconciler's next check of an unknown effect is now
    assert ledger.settle(effect.id).status == "confirmed"  # by lookup

    (charge,) = ledger.charges()
    assert handle.get_result()["id"] == charge["id"]
    assert calls == ["25.00"]


def test_dbos_retries_only_what_a_later_attempt_may_change() -> None:
    assert should_retry(TimeoutError("the provider's own error"))
    assert should_retry(LedgerUnavailable("down"))
    assert should_retry(LimitExceeded("per minute", 30, None))
    assert should_retry(NotSent("the provider refused it before doing anything"))
    assert not should_retry(EffectClosed("rejected", "cancelled"))
    assert not should_retry(NeedsReview("still in doubt after wait_timeout", "unknown"))
    assert not should_retry(TypeError("argument 'note' has no canonical form"))


# --- Bad input writes nothing ---------------------------------------------------------------------


def test_a_step_called_outside_a_workflow_has_no_run_identity(dbos: None, ledger: Stage) -> None:
    with pytest.raises(TypeError, match="No run identity"):
        charge_card("25.00")
    assert calls == [] and ledger.effects() == [] and ledger.charges() == []


def test_a_step_called_inside_another_step_is_refused(dbos: None, ledger: Stage) -> None:
    with pytest.raises(TypeError, match="inside another DBOS step"):
        start(pay_from_a_step, "25.00").get_result()
    assert calls == [] and ledger.effects() == [] and ledger.charges() == []


def test_an_argument_without_a_canonical_form_is_refused_naming_it(
    dbos: None, ledger: Stage
) -> None:
    with pytest.raises(TypeError, match="'note'"):
        start(pay_with_note, "25.00", {1: "a key that is not a string"}).get_result()
    assert calls == [] and ledger.effects() == [] and ledger.charges() == []


def test_a_ledger_that_is_down_runs_no_step_body(dbos: None, ledger: Stage) -> None:
    ledger_client.configure("http://127.0.0.1:9", ledger.key, retries=0, timeout=2)
    with pytest.raises(LedgerUnavailable):
        start(pay, "25.00").get_result()
    assert calls == [] and ledger.effects() == [] and ledger.charges() == []


# --- A crash after the provider committed ---------------------------------------------------------


def run_agent(
    stage: Stage, system_db: str, tmp_path: Path, run: str, *args: str, **env: str
) -> subprocess.Popen[str]:
    return stage.start_python(
        SCRIPT,
        *args,
        DBOS_SYSTEM_DATABASE_URL=system_db,
        DBOS_TEST_RUN=tmp_path.name + "-" + run,
        DBOS_TEST_CALLS=str(tmp_path / "calls"),
        **env,
    )


def finish(process: subprocess.Popen[str], timeout: float = 30.0) -> tuple[int, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return process.returncode, out + err


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_workflow_killed_after_the_charge_is_recovered_with_exactly_one_charge(
    stage: Stage, system_db: str, tmp_path: Path, flavour: str
) -> None:
    workflow_id = f"crash-{flavour}-{uuid.uuid4().hex[:8]}"
    crashed = run_agent(
        stage, system_db, tmp_path, workflow_id, "run", workflow_id, "25.00", flavour,
        DBOS_TEST_CRASH="after-charge",
    )  # fmt: skip
    code, output = finish(crashed)
    assert code == -9, output
    (charge,) = stage.charges()
    (effect,) = stage.effects("charge_card")
    assert effect.status == "dispatching" and effect.run_id == workflow_id

    if flavour == "sync":
        # The ledger's sweep comes first: the recovered step finds the charge confirmed.
        assert stage.settle(effect.id).status == "confirmed"
    recovering = run_agent(stage, system_db, tmp_path, workflow_id, "recover", workflow_id)
    if flavour == "async":
        # The recovered step asks while the dead process's lease still holds: it waits on the
        # ledger (a long poll of the live server's) until the sweep settles the effect.
        wait_until(long_polling)
        assert stage.settle(effect.id).status == "confirmed"
    code, output = finish(recovering)

    assert code == 0, output
    result = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    assert result["id"] == charge["id"]
    assert len(stage.charges()) == 1
    (effect,) = stage.effects("charge_card")
    assert effect.status == "confirmed" and effect.provider_ref == charge["id"]
    assert (tmp_path / "calls").read_text().count("\n") == 1  # the body ran in the first only


# --- The example ----------------------------------------------------------------------------------


def test_the_example_pays_and_mails_once_and_its_counts_agree(stage: Stage) -> None:
    """examples/dbos/agent.py as `make examples` runs it: DBOS's system database a SQLite file
    of its own (no DBOS_SYSTEM_DATABASE_URL)."""
    done = stage.run_python(ROOT / "examples" / "dbos" / "agent.py", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "charges at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert "messages at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert len(stage.payment_intents()) == 1 and len(stage.messages()) == 1
    assert sorted(e.tool for e in stage.effects()) == ["charge_card", "send_email"]
