"""Limits (issue 12, part 2): claims per calendar minute and amount per rolling 24 h, per tool
and per agent, refused with 429 `limit_exceeded` inside the claim's own transaction."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from ledger.effects.transitions import transition
from ledger.models import Agent, Alert, AmountCharge, Effect, LimitCounter, Tool
from ledger.models.states import Status
from ledger.policy.money import to_minor
from ledger.policy.toolfile import ToolFileError, load
from reconcilers.reconcile import process_one
from tests.factories import SETTLED, stored
from tests.helpers import assert_error

PATHS = {"amount_path": "amount", "currency_path": "currency"}


def limit_tool(**fields: Any) -> None:
    """Declare limits on charge_card (an UPDATE moves the configuration version, so every
    process reads the new policy)."""
    Tool.objects.filter(name="charge_card").update(**PATHS, **fields)


def charge(client, step: str, amount: str = "10.00", currency: str = "EUR", **body: Any) -> dict:
    return client.intent(step_id=step, request={"amount": amount, "currency": currency}, **body)


def refused(client, effect: dict, **body: Any) -> dict[str, Any]:
    body.setdefault("owner", "worker-1")
    response = client.post(f"/effects/{effect['id']}/claim", body)
    error = assert_error(response, 429, "limit_exceeded")
    assert response["Retry-After"] == str(error["retry_after"])
    return error


def test_a_claim_past_the_tools_claims_per_minute_is_429_naming_the_limit(alice):
    limit_tool(limit_claims_per_minute=2)
    for step in ("a", "b"):
        alice.claim(charge(alice, step)["id"])
    third = charge(alice, "c")

    error = refused(alice, third)

    limit = error["limit"]
    assert limit["which"] == "tool:charge_card:claims_per_minute"
    assert (limit["current"], limit["max"]) == (2, 2)
    assert 1 <= limit["retry_after"] <= 60 and error["retry_after"] == limit["retry_after"]
    assert stored(third).status == Status.PLANNED and stored(third).attempt == 0


def test_a_breach_alerts_once_per_limit_and_window(alice):
    limit_tool(limit_claims_per_minute=1)
    alice.claim(charge(alice, "a")["id"])
    refused(alice, charge(alice, "b"))
    refused(alice, charge(alice, "c"))
    # An intent posted with its claim rolls back whole; its breach still alerts (once).
    assert_error(
        alice.post(
            "/effects",
            {
                "run_id": "run-1",
                "step_id": "d",
                "tool": "charge_card",
                "target": "acct_42",
                "request": {"amount": "1.00", "currency": "EUR"},
                "claim": True,
                "owner": "w",
            },
        ),
        429,
        "limit_exceeded",
    )

    alerts = list(Alert.objects.filter(kind="limit_exceeded"))
    assert len(alerts) == 1
    assert alerts[0].key.startswith("tool:charge_card:claims_per_minute:")
    assert alerts[0].payload["limit"]["max"] == 1
    assert not Effect.objects.filter(step_id="d").exists()


def test_the_minute_window_is_the_calendar_minute(alice):
    limit_tool(limit_claims_per_minute=1)
    alice.claim(charge(alice, "a")["id"])
    waiting = charge(alice, "b")
    refused(alice, waiting)
    # The minute passes: the counter row now belongs to an earlier minute.
    LimitCounter.objects.filter(scope="tool:charge_card").update(period="2000-01-01T00:00Z")

    assert alice.claim(waiting["id"])["status"] == "dispatching"


def test_amounts_add_up_per_rolling_day_and_the_limit_is_never_passed(alice):
    limit_tool(limit_amount_per_day={"EUR": "25.00"})
    alice.claim(charge(alice, "a", "10.00")["id"])
    alice.claim(charge(alice, "b", "10.00")["id"])

    error = refused(alice, charge(alice, "c", "10.00"))

    assert error["limit"] == {
        "which": "tool:charge_card:amount_per_day:EUR",
        "currency": "EUR",
        "current": "20.00",
        "max": "25.00",
        # When the first charge leaves the 24-hour window.
        "retry_after": error["retry_after"],
    }
    assert 86000 < error["retry_after"] <= 86400
    assert alice.claim(charge(alice, "d", "5.00")["id"])["status"] == "dispatching"


def test_a_charge_older_than_24_hours_no_longer_counts(alice):
    limit_tool(limit_amount_per_day={"EUR": "15.00"})
    alice.claim(charge(alice, "a")["id"])
    later = charge(alice, "b")
    refused(alice, later)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_amountcharge SET charged_at = now() - interval '24 hours 1 second'"
        )

    assert alice.claim(later["id"])["status"] == "dispatching"


def test_currencies_are_counted_apart(alice):
    limit_tool(limit_amount_per_day={"EUR": "15.00", "USD": "15.00"})
    alice.claim(charge(alice, "a", "10.00", "EUR")["id"])
    alice.claim(charge(alice, "b", "10.00", "USD")["id"])

    error = refused(alice, charge(alice, "c", "10.00", "EUR"))

    assert error["limit"]["currency"] == "EUR"
    assert alice.claim(charge(alice, "d", "5.00", "USD")["id"])["status"] == "dispatching"


def test_an_amount_counts_once_per_effect_when_it_is_claimed_again(alice):
    limit_tool(limit_amount_per_day={"EUR": "15.00"})
    first = charge(alice, "a")
    alice.claim(first["id"])
    # Recovery hands a lost (maybe received) effect back for a retry under the same key.
    transition(stored(first), Status.PLANNED, actor="test", reason="retry_safe")

    again = alice.claim(first["id"])

    assert again["attempt"] == 2
    assert AmountCharge.objects.filter(effect_id=first["id"]).count() == 1
    refused(alice, charge(alice, "b"))  # the first effect's 10.00 still counts


def test_a_repeat_with_the_same_claim_id_does_not_count_again(alice):
    limit_tool(limit_claims_per_minute=1, limit_amount_per_day={"EUR": "10.00"})
    effect = charge(alice, "a")
    first = alice.claim(effect["id"], claim_id="c-1")

    repeat = alice.claim(effect["id"], claim_id="c-1")

    assert repeat["lease_token"] == first["lease_token"]
    assert LimitCounter.objects.get(scope="tool:charge_card", currency="").used == 1
    assert AmountCharge.objects.get().amount_minor == 1000


def test_not_sent_releases_the_amount(alice):
    limit_tool(limit_amount_per_day={"EUR": "15.00"})
    first = charge(alice, "a")
    token = alice.claim(first["id"])["lease_token"]
    second = charge(alice, "b")
    refused(alice, second)

    alice.outcome(first["id"], token, "not_sent")

    assert alice.claim(second["id"])["status"] == "dispatching"
    # Sending the first again would count it again: it no longer fits.
    refused(alice, first)


def test_a_proof_of_non_receipt_releases_the_amount(alice, provider):
    limit_tool(limit_amount_per_day={"EUR": "15.00"})
    lost = charge(alice, "a", claim=True)
    with connection.cursor() as cursor:
        cursor.execute(
            # The lease ran out long ago and the sweep queued the effect for a check then.
            "UPDATE ledger_effect SET lease_expires_at = now() - make_interval(secs => %s), "
            "next_check_at = now() - make_interval(secs => %s) WHERE id = %s",
            [SETTLED, SETTLED, lost["id"]],
        )
    second = charge(alice, "b")
    refused(alice, second)

    assert process_one(lost["id"]) is True  # not found at the provider, long settled

    assert stored(lost).status == Status.PLANNED
    assert not AmountCharge.objects.filter(effect_id=lost["id"]).exists()
    assert alice.claim(second["id"])["status"] == "dispatching"


def test_an_agents_limit_applies_to_its_own_claims_only(alice, bob):
    Agent.objects.filter(pk=alice.agent.pk).update(limit_claims_per_minute=1)
    alice.claim(charge(alice, "a")["id"])

    error = refused(alice, charge(alice, "b"))

    assert error["limit"]["which"] == "agent:alice:claims_per_minute"
    for step in ("a", "b"):
        bob.claim(charge(bob, step)["id"])


def test_a_refusal_by_the_agents_limit_takes_back_the_tools_count(alice, bob):
    limit_tool(limit_claims_per_minute=2)
    Agent.objects.filter(pk=alice.agent.pk).update(limit_amount_per_day={"EUR": "10.00"})
    alice.claim(charge(alice, "a")["id"])

    error = refused(alice, charge(alice, "b"))

    assert error["limit"]["which"] == "agent:alice:amount_per_day:EUR"
    assert LimitCounter.objects.get(scope="tool:charge_card", currency="").used == 1
    bob.claim(charge(bob, "a")["id"])
    assert refused(bob, charge(bob, "b"))["limit"]["which"] == (
        "tool:charge_card:claims_per_minute"
    )


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        ({"amount": "10.00"}, "request.currency"),
        ({"currency": "EUR"}, "request.amount"),
        ({"amount": "10.001", "currency": "EUR"}, "request.amount"),
        ({"amount": 10.5, "currency": "EUR"}, None),  # exact JSON decimal: accepted
        ({"amount": "10", "currency": "GBP"}, "request.currency"),  # no limit in GBP
        ({"amount": "10", "currency": "EURO"}, "request.currency"),
    ],
)
def test_an_intent_without_a_readable_amount_is_422_naming_the_field(alice, request_body, field):
    limit_tool(limit_amount_per_day={"EUR": "100.00"})
    response = alice.post(
        "/effects",
        {
            "run_id": "r",
            "step_id": "s",
            "tool": "charge_card",
            "target": "t",
            "request": request_body,
        },
    )
    if field is None:
        assert response.status_code == 201, response.content
        return
    error = assert_error(response, 422, "validation_error")
    assert field in error["fields"]
    assert field in error["detail"]
    assert not Effect.objects.exists()


@pytest.mark.parametrize(
    ("request_body", "detail"),
    [
        ({"amount": "10.00"}, "needs the request's currency (request.currency is missing)"),
        ({"currency": "EUR"}, "needs the request's amount (request.amount is missing)"),
        ({}, "needs the request's amount and currency (request.amount and request.currency are"),
        ({"amount": "1.001", "currency": "EUR"}, "cannot use the request's amount"),
        ({"amount": "1", "currency": "EURO"}, "cannot use the request's currency"),
    ],
)
def test_the_refusal_names_exactly_the_fields_missing_or_wrong(alice, request_body, detail):
    limit_tool(limit_amount_per_day={"EUR": "100.00"})
    body = {"run_id": "r", "step_id": "s", "tool": "charge_card", "target": "t"}
    response = alice.post("/effects", {**body, "request": request_body})
    error = assert_error(response, 422, "validation_error")
    assert detail in error["detail"], error
    named = {what for what in ("amount", "currency") if f"request's {what}" in detail}
    named |= {"currency"} if "amount and currency" in detail else set()
    assert {f"request.{what}" for what in named} == set(error["fields"])
    assert all(field in error["detail"] for field in error["fields"])


def test_minor_units_follow_the_currency_exponent():
    assert (to_minor("12.50", "EUR"), to_minor("1250", "JPY"), to_minor("1.005", "KWD")) == (
        1250,
        1250,
        1005,
    )
    with pytest.raises(ValueError):
        to_minor("12.5", "JPY")


def test_a_tool_with_limits_must_declare_its_paths(tmp_path: Path, db):
    toml = tmp_path / "tools.toml"
    toml.write_text('[tools.pay]\nlimit_amount_per_day = { EUR = "10.00" }\namount_path = "a"\n')
    with pytest.raises(ToolFileError, match="currency_path"):
        load(toml)
    toml.write_text(
        '[tools.pay]\nlimit_claims_per_minute = 5\nlimit_amount_per_day = { eur = "10.00" }\n'
        'amount_path = "a.v"\ncurrency_path = "a.c"\n'
    )
    load(toml)
    tool = Tool.objects.get(name="pay")
    assert (tool.limit_claims_per_minute, tool.limit_amount_per_day) == (5, {"EUR": "10.00"})


def test_agentlimits_sets_shows_and_clears_an_agents_limits(alice):
    out = StringIO()
    call_command(
        "agentlimits",
        "alice",
        "--claims-per-minute",
        "30",
        "--amount-per-day",
        "500.00:EUR",
        "--amount-per-day",
        "1000:JPY",
        stdout=out,
    )
    alice.agent.refresh_from_db()
    assert alice.agent.limit_claims_per_minute == 30
    assert alice.agent.limit_amount_per_day == {"EUR": "500.00", "JPY": "1000"}
    assert "500.00 EUR" in out.getvalue()
    with pytest.raises(CommandError, match="decimal places"):
        call_command("agentlimits", "alice", "--amount-per-day", "1.5:JPY")

    call_command("agentlimits", "alice", "--clear", stdout=out)

    alice.agent.refresh_from_db()
    assert (alice.agent.limit_claims_per_minute, alice.agent.limit_amount_per_day) == (None, {})


def test_an_amount_alone_above_the_maximum_waits_a_whole_day(alice):
    limit_tool(limit_amount_per_day={"EUR": "5.00"})

    error = refused(alice, charge(alice, "a", "10.00"))

    assert error["retry_after"] == 86400 and error["limit"]["current"] == "0.00"
    key = Alert.objects.get(kind="limit_exceeded").key
    assert key.startswith("tool:charge_card:amount_per_day:EUR:") and key.endswith("Z")


def _agent_form(agent: Agent, **fields: str) -> dict[str, str]:
    return {
        "name": agent.name,
        "is_active": "on",
        "created_at_0": f"{agent.created_at:%Y-%m-%d}",
        "created_at_1": f"{agent.created_at:%H:%M:%S}",
        "keys-TOTAL_FORMS": "0",
        "keys-INITIAL_FORMS": "0",
        "keys-MIN_NUM_FORMS": "0",
        "keys-MAX_NUM_FORMS": "1000",
        **fields,
    }


def test_an_admin_sets_an_agents_limits_and_a_bad_amount_is_refused(db):
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="a long passphrase 42"))
    agent = Agent.objects.create(name="carol")
    url = reverse("admin:ledger_agent_change", args=[agent.id])

    bad = admin.post(url, _agent_form(agent, limit_amount_per_day='{"JPY": "1.5"}'))
    assert bad.status_code == 200 and "decimal places" in bad.content.decode()
    saved = admin.post(
        url,
        _agent_form(agent, limit_claims_per_minute="7", limit_amount_per_day='{"eur": "9.99"}'),
    )

    assert saved.status_code == 302
    agent.refresh_from_db()
    assert (agent.limit_claims_per_minute, agent.limit_amount_per_day) == (7, {"EUR": "9.99"})
