"""Who asked for an effect, and what that allows: a halted agent gets no lease through a
compensation, an agent compensates only as its tools declare, and it cannot act on what an
operator decided. Black-box over the agent API and the decision pages where the findings were;
PostgreSQL's own rules are checked on raw SQL."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.db import ProgrammingError, connection, connections

from ledger.containment.halts import halt
from ledger.models import Effect, Tool
from ledger.policy import configversion
from ledger.policy.toolfile import ToolFileError, load
from tests.factories import signed_in
from tests.helpers import assert_error

REFUND = {"request": {"charge": "ch_1", "amount": "10.00", "currency": "EUR"}}


def _charged(alice, step_id: str = "pay") -> dict:
    effect = alice.intent(step_id=step_id, claim=True)
    return alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")


def _compensate(alice, parent: dict, **body):
    return alice.post(f"/effects/{parent['id']}/compensate", {**REFUND, **body})


def _operator_compensates(olga, parent: dict) -> Effect:
    """An operator decides a refund on the effect's page, as the review finding did."""
    effect = Effect.objects.get(pk=parent["id"])
    response = signed_in(olga).post(
        f"/effects/{effect.id}/decide/compensate",
        {
            "version": effect.version,
            "reason": "customer asked",
            "confirm": "on",
            "compensation_request": '{"charge": "ch_1", "amount": "10.00", "currency": "EUR"}',
        },
    )
    assert response.status_code == 302, response.content
    return Effect.objects.get(parent_id=effect.id, kind="compensation")


# --- H2: halts and an agent's own compensations --------------------------------------------


@pytest.mark.parametrize("scope", ["all", "agent", "run"])
def test_a_halted_agent_gets_no_lease_through_its_own_compensation(alice, scope):
    charge = _charged(alice)
    value = {"all": "", "agent": "alice", "run": "run-1"}[scope]
    halt(scope, value, reason="runaway agent", by="olga")

    # The finding: a compensation naming any tool, then a claim, gave a lease.
    assert_error(_compensate(alice, charge, tool="charge_card"), 422, "validation_error")
    refund = _compensate(alice, charge)
    assert refund.status_code == 201, refund.content
    refused = assert_error(
        alice.post(f"/effects/{refund.json()['id']}/claim", {"owner": "w"}), 409, "halted"
    )
    assert refused["halt"]["scope"] == scope
    assert Effect.objects.get(pk=refund.json()["id"]).status == "planned"


def test_an_agent_names_only_the_declared_compensating_tool_or_none(alice):
    charge = _charged(alice)
    body = assert_error(_compensate(alice, charge, tool="charge_card"), 422, "validation_error")
    assert "refund_card" in body["fields"]["tool"]
    assert not Effect.objects.filter(kind="compensation").exists()
    named = _compensate(alice, charge, tool="refund_card")
    assert named.status_code == 201 and named.json()["tool"] == "refund_card"


def test_a_tool_without_compensated_by_is_compensated_by_operators_only(alice):
    email = alice.intent(tool="send_email", target="a@example.com", claim=True)
    sent = alice.outcome(email["id"], email["lease_token"])
    body = assert_error(
        alice.post(f"/effects/{sent['id']}/compensate", {"tool": "send_email", "request": {}}),
        422,
        "validation_error",
    )
    assert "no compensated_by" in body["fields"]["tool"]
    assert not Effect.objects.filter(kind="compensation").exists()


def test_one_compensation_per_parent_unless_the_tool_allows_more(alice):
    charge = _charged(alice)
    first = _compensate(alice, charge, compensation_key="a").json()
    again = assert_error(
        _compensate(alice, charge, compensation_key="b"), 409, "compensation_limit_reached"
    )
    assert again["limit"] == 1 and again["compensations"] == [first["id"]]
    # The same key is a repeat, not a second one.
    assert _compensate(alice, charge, compensation_key="a").status_code == 200
    # A cancelled compensation frees its place.
    assert alice.post(f"/effects/{first['id']}/cancel", {}).status_code == 200
    assert _compensate(alice, charge, compensation_key="b").status_code == 201

    Tool.objects.filter(name="refund_card").update(compensations_per_parent=3)
    configversion.expire()  # as every process does within a second (test_propagation.py)
    assert _compensate(alice, charge, compensation_key="c").status_code == 201
    assert _compensate(alice, charge, compensation_key="d").status_code == 201
    limited = _compensate(alice, charge, compensation_key="e")
    assert_error(limited, 409, "compensation_limit_reached")


@pytest.mark.django_db(transaction=True)
def test_parallel_compensations_of_one_parent_record_one(alice):
    charge = _charged(alice)
    codes: list[int] = []

    def post(n: int) -> None:
        try:
            codes.append(_compensate(alice, charge, compensation_key=f"k{n}").status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [201] + [409] * 7
    assert Effect.objects.filter(parent_id=charge["id"], kind="compensation").count() == 1


def test_postgresql_refuses_an_agents_compensation_that_breaks_the_rules(alice):
    """A process that skips the checks (an old one, raw SQL) meets the insert trigger."""
    charge = _charged(alice)
    refund = _compensate(alice, charge).json()
    with connection.cursor() as cursor, pytest.raises(ProgrammingError) as refused:
        # A copy of the agent's refund under another key and with a charging tool.
        cursor.execute(
            "INSERT INTO ledger_effect SELECT (json_populate_record(e, json_build_object("
            "'id', gen_random_uuid(), 'effect_key', 'raw:1', 'tool', 'charge_card', "
            "'idempotency_key', 'raw-1'))).* FROM ledger_effect e WHERE e.id = %s",
            [refund["id"]],
        )
    assert "ledger_compensation_refused" in str(refused.value)
    assert "tool_not_declared" in str(refused.value)


def test_compensations_per_parent_is_read_from_the_tool_file(db, tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text('[tools.refund_x]\npreset = "idempotent"\ncompensations_per_parent = 2\n')
    load(path)
    assert Tool.objects.get(name="refund_x").compensations_per_parent == 2
    path.write_text('[tools.refund_x]\npreset = "idempotent"\ncompensations_per_parent = 0\n')
    with pytest.raises(ToolFileError, match="compensations_per_parent"):
        load(path)


# --- M1: what an operator decided is not the agent's to act on ------------------------------


def test_an_agent_cannot_cancel_claim_or_report_on_an_operators_compensation(alice, olga):
    refund = _operator_compensates(olga, _charged(alice))
    assert alice.get(f"/effects/{refund.id}").json()["requested_by"] == "operator"
    for path, body in [
        ("cancel", {}),
        ("claim", {"owner": "w"}),
        ("outcome", {"lease_token": "made-up", "status": "confirmed", "provider_ref": "re_x"}),
        ("compensate", {}),
    ]:
        assert_error(alice.post(f"/effects/{refund.id}/{path}", body), 409, "operator_decided")
    refund.refresh_from_db()
    assert (refund.status, refund.provider_ref) == ("planned", "")
    # Its agent's recovery says it waits: the ledger or a person carries it out.
    plan = alice.post("/recovery", {"dry_run": True}).json()["effects"]
    assert [(p["action"], p["reason"]) for p in plan if p["effect"]["id"] == str(refund.id)] == [
        ("wait", "operator_decided")
    ]


def test_an_agent_cannot_cancel_an_operators_compensation_awaiting_four_eyes(alice, olga):
    Tool.objects.filter(name="refund_card").update(
        approve_above=Decimal("5.00"), amount_path="amount", currency_path="currency"
    )
    configversion.expire()
    refund = _operator_compensates(olga, _charged(alice))
    assert refund.status == "awaiting_approval"
    assert_error(alice.post(f"/effects/{refund.id}/cancel", {}), 409, "operator_decided")
    assert Effect.objects.get(pk=refund.id).status == "awaiting_approval"


def test_an_agents_own_effects_say_the_agent_asked(alice):
    effect = alice.intent()
    assert effect["requested_by"] == "agent"
    assert alice.claim(effect["id"])["requested_by"] == "agent"


def test_a_decision_recorded_under_the_agent_says_an_operator_asked(alice, olga):
    _operator_compensates(olga, _charged(alice))
    listed = alice.get("/effects").json()["items"]
    decisions = [e for e in listed if e["kind"] == "decision"]
    assert decisions and {e["requested_by"] for e in decisions} == {"operator"}
