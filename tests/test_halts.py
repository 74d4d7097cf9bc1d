"""Halts: claims refused with 409 `halted` (also in PostgreSQL, for processes
that know nothing of halts), work in flight still reporting back, recovery waiting, the
ledger's own sends, the commit order against concurrent claims, the shell, the pages, and the
decisions recorded under the reserved system agent."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, ProgrammingError, connection, connections, transaction
from ledger_client import Halted, Ledger

from ledger.containment.halts import halt, resume, system_agent
from ledger.containment.keys import ReservedAgent, issue_key
from ledger.effects.transitions import claim, trigger_refusal
from ledger.errors import Halted as HaltedError
from ledger.models import Alert, ApiKey, Effect, EffectEvent, Halt
from ledger.models.states import Kind
from ledger.policy.agentkeys import SYSTEM_AGENT
from ledger.rules.halts import HALT_LOCK, refusal_from_trigger
from reconcilers.execution import execute_one, redrive_executions
from tests.factories import signed_in
from tests.helpers import assert_error


def halt_tool(tool: str = "charge_card", **kwargs: Any) -> Halt:
    return halt("tool", tool, reason="duplicate charges seen", by="olga", **kwargs).halt


def claimable(alice, step: str = "step-1", **body: Any) -> dict:
    return alice.intent(step_id=step, **body)


# --- The agent API ---------------------------------------------------------------------------


def test_a_claim_of_a_halted_tool_is_refused_with_the_halt(alice):
    effect = claimable(alice)
    halt_tool()

    body = assert_error(alice.post(f"/effects/{effect['id']}/claim", {"owner": "w"}), 409, "halted")

    assert body["halt"]["scope"] == "tool"
    assert body["halt"]["value"] == "charge_card"
    assert body["halt"]["reason"] == "duplicate charges seen"
    assert body["halt"]["by"] == "olga"
    assert body["halt"]["since"]
    assert Effect.objects.get(pk=effect["id"]).status == "planned"


def test_an_intent_with_a_claim_is_refused_and_records_nothing(alice):
    halt_tool()
    payload = {
        "run_id": "run-1",
        "step_id": "pay",
        "tool": "charge_card",
        "target": "acct_42",
        "request": {"amount": "10.00", "currency": "EUR"},
        "claim": True,
        "owner": "w",
    }

    assert_error(alice.post("/effects", payload), 409, "halted")

    assert not Effect.objects.filter(effect_key="run-1:pay").exists()


def test_an_intent_without_a_claim_is_still_accepted(alice):
    halt_tool()

    effect = alice.intent(step_id="later")

    assert effect["status"] == "planned"


def test_a_repeat_with_the_same_claim_id_is_refused_once_halted(alice):
    effect = claimable(alice)
    claimed = alice.claim(effect["id"], claim_id="c-1")
    assert alice.claim(effect["id"], claim_id="c-1")["lease_token"] == claimed["lease_token"]

    halt_tool()

    response = alice.post(f"/effects/{effect['id']}/claim", {"owner": "w", "claim_id": "c-1"})
    assert assert_error(response, 409, "halted")["halt"]["value"] == "charge_card"


def test_heartbeats_carry_the_halt_and_outcomes_are_accepted(alice):
    effect = claimable(alice)
    token = alice.claim(effect["id"])["lease_token"]
    beat = alice.post(f"/effects/{effect['id']}/heartbeat", {"lease_token": token})
    assert beat.status_code == 200 and beat.json()["halt"] is None

    halt("agent", "alice", reason="runaway agent", by="olga")

    beat = alice.post(f"/effects/{effect['id']}/heartbeat", {"lease_token": token})
    assert beat.status_code == 200, beat.content
    assert beat.json()["halt"]["scope"] == "agent"
    assert beat.json()["halt"]["reason"] == "runaway agent"
    assert alice.outcome(effect["id"], token, provider_ref="ch_1")["status"] == "confirmed"


def test_an_agent_halt_stops_that_agent_only(alice, bob):
    mine, theirs = claimable(alice), claimable(bob)
    halt("agent", "alice", reason="runaway agent", by="olga")

    assert_error(alice.post(f"/effects/{mine['id']}/claim", {"owner": "w"}), 409, "halted")
    assert bob.claim(theirs["id"])["status"] == "dispatching"


def test_a_run_halt_covers_that_run_id_for_every_agent(alice, bob):
    halted_mine = alice.intent(run_id="order-7")
    halted_theirs = bob.intent(run_id="order-7")
    other = alice.intent(run_id="order-8")
    halt("run", "order-7", reason="bad order", by="olga")

    assert_error(alice.post(f"/effects/{halted_mine['id']}/claim", {"owner": "w"}), 409, "halted")
    assert_error(bob.post(f"/effects/{halted_theirs['id']}/claim", {"owner": "w"}), 409, "halted")
    assert alice.claim(other["id"])["status"] == "dispatching"


def test_halting_everything_and_resuming(alice):
    effect = claimable(alice)
    everything = halt("all", "", reason="incident", by="olga").halt
    assert_error(alice.post(f"/effects/{effect['id']}/claim", {"owner": "w"}), 409, "halted")

    assert resume(everything.pk, reason="fixed", by="otto").changed

    assert alice.claim(effect["id"])["status"] == "dispatching"
    assert Halt.objects.get(pk=everything.pk).resumed_by == "otto"


def test_halting_twice_changes_nothing_and_resuming_twice_records_once(alice):
    first = halt_tool()
    again = halt("tool", "charge_card", reason="again", by="otto")
    assert not again.changed and again.halt.pk == first.pk

    assert resume(first.pk, reason="ok", by="olga").changed
    assert not resume(first.pk, reason="ok", by="otto").changed
    assert Effect.objects.filter(agent__name=SYSTEM_AGENT, kind=Kind.DECISION).count() == 2


# --- Compensations ---------------------------------------------------------------------------


def test_an_operators_compensations_run_through_an_agent_halt_unless_it_includes_them(
    alice, make_effect
):
    refund = make_effect("planned", kind=Kind.COMPENSATION, tool="refund_card")  # an operator's
    action = make_effect("planned")
    by_agent = halt("agent", "alice", reason="double charge", by="olga").halt

    assert_error(alice.post(f"/effects/{action.id}/claim", {"owner": "w"}), 409, "halted")
    # The ledger's executor claims what an operator decided (the agent may not).
    assert claim_as_executor(refund).status == "dispatching"

    resume(by_agent.pk, reason="again, with refunds", by="olga")
    later = make_effect("planned", kind=Kind.COMPENSATION, tool="refund_card")
    halt("agent", "alice", reason="stop refunds too", by="olga", include_compensations=True)
    with pytest.raises(HaltedError):
        claim_as_executor(later)


def claim_as_executor(effect: Effect) -> Effect:
    claimed, _ = claim(
        effect, owner="ledger-executor", claim_id=None, lease_seconds=60, actor="system:executor"
    )
    return claimed


def test_a_halt_of_the_compensations_own_tool_stops_it(alice, make_effect):
    refund = make_effect("planned", kind=Kind.COMPENSATION, tool="refund_card")
    halt_tool("refund_card")

    with pytest.raises(HaltedError):
        claim_as_executor(refund)


def test_the_ledgers_own_sends_and_the_redrive_skip_halted_work(alice, make_effect, rq_queue):
    refund = make_effect("planned", kind=Kind.COMPENSATION, tool="refund_card")
    refund_halt = halt_tool("refund_card")

    assert redrive_executions() == 0
    assert execute_one(refund.id) is False
    assert Effect.objects.get(pk=refund.id).status == "planned"

    resume(refund_halt.pk, reason="provider fixed", by="olga")
    assert redrive_executions() == 1


# --- Recovery --------------------------------------------------------------------------------


def test_recovery_answers_wait_halted_for_a_planned_effect_a_halt_covers(alice):
    effect = claimable(alice)
    other = alice.intent(step_id="read", tool="get_balance")
    halt_tool()

    response = alice.post("/recovery", {"dry_run": True})

    plans = {item["effect"]["id"]: item for item in response.json()["effects"]}
    assert (plans[effect["id"]]["action"], plans[effect["id"]]["reason"]) == ("wait", "halted")
    assert plans[other["id"]]["action"] == "retry_safe"


# --- In PostgreSQL: processes that know nothing of halts ------------------------------------


def test_the_database_refuses_a_claim_by_an_old_process(alice):
    effect = claimable(alice)
    halt_tool()

    # What a process that does not know halts sends: the bare conditional UPDATE.
    with (
        pytest.raises(ProgrammingError) as refused,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "UPDATE ledger_effect SET status = 'dispatching', attempt = attempt + 1, "
            "lease_token = 'old', lease_expires_at = now() + interval '1 minute' "
            "WHERE id = %s AND status = 'planned'",
            [effect["id"]],
        )

    halted = refusal_from_trigger(refused.value)
    assert halted is not None
    assert halted.status == 409
    assert halted.extra["halt"]["value"] == "charge_card"
    assert halted.extra["halt"]["since"] is not None
    assert Effect.objects.get(pk=effect["id"]).status == "planned"


def test_the_triggers_refusal_reads_as_409_halted_with_the_halt(alice):
    effect = claimable(alice)
    halt_tool()
    with (
        pytest.raises(DatabaseError) as caught,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "UPDATE ledger_effect SET status = 'dispatching' WHERE id = %s", [effect["id"]]
        )
    refused = trigger_refusal(caught.value)
    assert refused is not None and (refused.status, refused.code) == (409, "halted")
    assert refused.extra["halt"]["scope"] == "tool"


def test_an_intent_with_its_claim_is_refused_by_the_insert_trigger(alice):
    """The intent and its claim are one INSERT (ledger.effects.hotpath): the halt is
    PostgreSQL's."""
    halt_tool()
    response = alice.post(
        "/effects",
        {
            "run_id": "run-h",
            "step_id": "s",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "1.00", "currency": "EUR"},
            "claim": True,
            "owner": "w",
        },
    )
    error = assert_error(response, 409, "halted")
    assert error["halt"]["scope"] == "tool"
    assert not Effect.objects.filter(run_id="run-h").exists()


def test_the_database_lets_other_moves_through_while_halted(alice):
    effect = claimable(alice)
    halt_tool()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET status = 'cancelled' WHERE id = %s", [effect["id"]]
        )
    assert Effect.objects.get(pk=effect["id"]).status == "cancelled"


def test_the_lock_key_in_the_trigger_is_the_one_halt_takes(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef('ledger_halt_for_claim'::regproc)")
        assert f"pg_advisory_xact_lock_shared({HALT_LOCK})" in cursor.fetchone()[0]


# --- Commit order ----------------------------------------------------------------------------


def _lock_waiters() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND objid = %s "
            # Advisory locks are per database: another test database's waiters are not ours.
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [HALT_LOCK & 0xFFFFFFFF],
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_halt_waits_for_a_claim_that_passed_its_check_then_no_later_claim_commits(
    make_agent,
):
    alice = make_agent("alice")
    first, second = claimable(alice, "one"), claimable(alice, "two")
    checked, release, halted = threading.Event(), threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def claimer() -> None:
        # A claim on its own connection: past the trigger's check, not committed yet.
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE ledger_effect SET status = 'dispatching', attempt = attempt + 1 "
                    "WHERE id = %s RETURNING status",
                    [first["id"]],
                )
                outcome["claimed"] = cursor.fetchone()[0]
                checked.set()
                release.wait(10)
        finally:
            connection.close()

    def halter() -> None:
        try:
            halt_tool()
            halted.set()
        finally:
            connection.close()

    claiming = threading.Thread(target=claimer)
    claiming.start()
    assert checked.wait(10)
    halting = threading.Thread(target=halter)
    halting.start()
    # halt() waits on the advisory lock the open claim holds shared, and has not returned.
    for _ in range(200):
        if _lock_waiters():
            break
        threading.Event().wait(0.05)
    assert _lock_waiters() == 1
    assert not halted.is_set()

    release.set()
    claiming.join(10)
    assert halted.wait(10)
    halting.join(10)

    assert outcome["claimed"] == "dispatching"
    assert Effect.objects.get(pk=first["id"]).status == "dispatching"
    assert_error(alice.post(f"/effects/{second['id']}/claim", {"owner": "w"}), 409, "halted")


# --- Decisions, the system agent, alerts -----------------------------------------------------


def test_each_halt_and_resume_is_a_decision_of_the_system_agent(alice):
    made = halt_tool()
    resume(made.pk, reason="provider says fixed", by="otto")

    decisions = list(Effect.objects.filter(kind=Kind.DECISION).order_by("seq"))
    assert [d.agent.name for d in decisions] == [SYSTEM_AGENT, SYSTEM_AGENT]
    assert [d.provenance["action"] for d in decisions] == ["halt", "resume"]
    assert [d.provenance["actor"] for d in decisions] == ["olga", "otto"]
    assert [d.provenance["reason"] for d in decisions] == [
        "duplicate charges seen",
        "provider says fixed",
    ]
    assert {d.target for d in decisions} == {"halt:tool:charge_card"}
    assert all(d.parent_id is None and d.status == "confirmed" for d in decisions)
    events = EffectEvent.objects.filter(effect__in=decisions, kind="decision")
    assert sorted(e.actor for e in events) == ["olga", "otto"]


def test_no_key_can_be_issued_for_the_system_agent(db):
    # Migration 0008 creates it; a transactional test on the same worker may have flushed it.
    system = system_agent()

    with pytest.raises(ReservedAgent):
        issue_key(system)
    with pytest.raises(CommandError, match="reserved"):
        call_command("createagent", SYSTEM_AGENT)
    assert not ApiKey.objects.filter(agent=system).exists()


def test_a_halt_enqueues_one_alert(alice):
    made = halt_tool()
    halt("tool", "charge_card", reason="again", by="otto")

    alerts = list(Alert.objects.filter(kind="halt"))
    assert [a.key for a in alerts] == [str(made.pk)]
    assert alerts[0].payload["reason"] == "duplicate charges seen"


def test_bad_halts_are_refused_and_record_nothing(alice):
    from ledger.errors import ValidationFailed

    for scope, value, reason in [
        ("tool", "", "empty name"),
        ("agent", "nobody", "unknown agent"),
        ("all", "charge_card", "all names nothing"),
        ("everything", "", "unknown scope"),
        ("tool", "charge_card", "   "),
    ]:
        with pytest.raises(ValidationFailed):
            halt(scope, value, reason=reason, by="olga")
    assert not Halt.objects.exists()
    assert not Effect.objects.filter(kind=Kind.DECISION).exists()


# --- The shell -------------------------------------------------------------------------------


def run(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_the_halt_and_resume_commands(alice):
    effect = claimable(alice)

    said = run("halt", "--tool", "charge_card", "--reason", "dupes")
    assert "Halted" in said
    made = Halt.objects.get(resumed_at__isnull=True)
    assert made.halted_by.startswith("shell:")
    assert "Already halted" in run("halt", "--tool", "charge_card", "--reason", "dupes")
    assert_error(alice.post(f"/effects/{effect['id']}/claim", {"owner": "w"}), 409, "halted")

    assert "Resumed" in run("resume", "--tool", "charge_card", "--reason", "fixed")
    assert alice.claim(effect["id"])["status"] == "dispatching"
    with pytest.raises(CommandError, match="No active halt"):
        run("resume", "--tool", "charge_card", "--reason", "again")


def test_the_commands_refuse_bad_arguments(alice):
    with pytest.raises(CommandError):
        run("halt", "--tool", "charge_card")  # no reason
    with pytest.raises(CommandError):
        run("halt", "--tool", "charge_card", "--agent", "alice", "--reason", "x")
    with pytest.raises(CommandError, match="No such agent"):
        run("halt", "--agent", "nobody", "--reason", "x")
    run("halt", "--all", "--include-compensations", "--reason", "incident")
    assert Halt.objects.get().include_compensations


# --- The pages -------------------------------------------------------------------------------


def test_an_operator_halts_and_resumes_in_the_page(alice, olga, audrey):
    page = signed_in(olga)
    response = page.post(
        "/halts/add",
        {"scope": "tool", "value": "charge_card", "reason": "dupes", "confirm": "on"},
    )
    assert response.status_code == 302
    made = Halt.objects.get()
    assert made.halted_by == "olga"

    for url in ("/", "/queue/", "/halts/", "/audit/chain/"):
        shown = signed_in(audrey).get(url)
        assert b'id="halt-banner"' in shown.content, url

    assert (
        page.post(f"/halts/{made.pk}/resume", {"reason": "ok", "confirm": "on"}).status_code == 302
    )
    assert b'id="halt-banner"' not in signed_in(audrey).get("/").content


def test_the_halt_form_refuses_bad_input_with_422(olga):
    page = signed_in(olga)
    no_reason = page.post("/halts/add", {"scope": "tool", "value": "charge_card", "confirm": "on"})
    unconfirmed = page.post("/halts/add", {"scope": "tool", "value": "x", "reason": "r"})
    unknown_agent = page.post(
        "/halts/add", {"scope": "agent", "value": "nobody", "reason": "r", "confirm": "on"}
    )
    assert [no_reason.status_code, unconfirmed.status_code, unknown_agent.status_code] == [422] * 3
    assert not Halt.objects.exists()


def test_auditors_see_halts_but_cannot_halt(alice, audrey):
    halt_tool()
    page = signed_in(audrey)
    shown = page.get("/halts/")
    assert shown.status_code == 200 and b"duplicate charges seen" in shown.content
    assert b'id="halt-form"' not in shown.content
    refused = page.post("/halts/add", {"scope": "all", "reason": "r", "confirm": "on"})
    assert refused.status_code == 403
    assert Halt.objects.count() == 1


# --- The Python client -----------------------------------------------------------------------


class HandClock:
    """A `ledger_client.Clock` whose heartbeat runs only when the test says so."""

    def every(self, seconds: float, action: Callable[[], bool], name: str) -> Callable[[], None]:
        self.beat = action
        return lambda: None


@pytest.mark.django_db(transaction=True)
def test_the_client_raises_halted_and_its_heartbeat_reports_the_halt(live_server, make_agent):
    key = make_agent("executor").key
    clock = HandClock()
    request = {"amount": "5.00", "currency": "EUR"}
    with Ledger(live_server.url, key, owner="w", clock=clock) as ledger:
        with ledger.effect("run-9", "before", "charge_card", "acct_42", request) as e:
            assert e.halt is None
            halt("agent", "executor", reason="runaway", by="olga")
            clock.beat()
            assert e.halt is not None and e.halt.reason == "runaway"
            e.not_sent("halted before sending")

        after = ledger.effect("run-9", "after", "charge_card", "acct_42", request)
        with pytest.raises(Halted) as refused, after:
            pytest.fail("a halted effect must not run")
    assert refused.value.halt is not None
    assert refused.value.halt.scope == "agent"
    assert refused.value.halt.by == "olga"
