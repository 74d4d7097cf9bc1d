"""Limits are PostgreSQL's to enforce (migration 0014): a claim made by raw SQL, as a process
that knows nothing of limits would make it, is counted and refused by the trigger; and the
trigger's arithmetic agrees with the Python that validates intents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from ledger.models import AmountCharge, Effect, LimitCounter, Tool
from ledger.models.states import Status
from ledger.policy.money import EXPONENTS, to_minor
from ledger.rules.limits import refusal_from_trigger
from tests.factories import stored
from tests.test_limits import PATHS, charge

_EFFECTS = Effect._meta.db_table


def _sql(query: str, params: list[Any] | None = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(query, params or [])
        return cursor.fetchone()


def _raw_claim(effect_id: str) -> None:
    """What an old process would run: the transition alone, no limit check of its own."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_EFFECTS} SET status = 'dispatching', attempt = attempt + 1, "
            "lease_token = 'old-process', lease_owner = 'old', "
            "lease_expires_at = now() + interval '60 seconds', lease_seconds = 60 "
            "WHERE id = %s AND status = 'planned'",
            [effect_id],
        )


def _refused_raw_claim(effect_id: str) -> dict[str, Any]:
    with pytest.raises(DatabaseError) as caught:
        _raw_claim(effect_id)
    refusal = refusal_from_trigger(caught.value)
    assert refusal is not None, caught.value
    return refusal.extra["limit"]


@pytest.mark.parametrize("code", [*sorted(EXPONENTS), "EUR", "USD", "GBP"])
def test_the_triggers_exponents_are_pythons(db, code):
    assert _sql("SELECT ledger_currency_exponent(%s)", [code])[0] == EXPONENTS.get(code, 2)


@pytest.mark.parametrize(
    ("amount", "code"),
    [
        ("12.50", "EUR"), ("0", "EUR"), ("7", "JPY"), ("1.234", "KWD"), ("100000000", "USD"),
        ("12.505", "EUR"), ("1.5", "JPY"), ("-1", "EUR"), ("abc", "EUR"), ("1e3", "EUR"),
        ("", "EUR"), ("NaN", "EUR"),
    ],
)  # fmt: skip
def test_the_triggers_minor_units_are_pythons(db, amount, code):
    try:
        expected = to_minor(amount, code)
    except ValueError:
        expected = None
    assert _sql("SELECT ledger_to_minor(%s, %s)", [amount, code])[0] == expected


def test_a_raw_sql_claim_past_the_claims_per_minute_limit_is_refused_by_postgres(alice):
    Tool.objects.filter(name="charge_card").update(**PATHS, limit_claims_per_minute=2)
    first, second, third = (charge(alice, step) for step in ("a", "b", "c"))
    _raw_claim(first["id"])
    _raw_claim(second["id"])

    limit = _refused_raw_claim(third["id"])

    assert limit["which"] == "tool:charge_card:claims_per_minute"
    assert (limit["current"], limit["max"]) == (2, 2)
    assert stored(third).status == Status.PLANNED
    assert stored(first).status == stored(second).status == Status.DISPATCHING
    # The refusal took nothing: the minute's counter holds the two claims that passed.
    assert LimitCounter.objects.get(scope="tool:charge_card", currency="").used == 2


def test_a_raw_sql_claim_past_the_agents_amount_limit_is_refused_and_counts_nothing(alice):
    Tool.objects.filter(name="charge_card").update(**PATHS)
    alice.agent.limit_amount_per_day = {"EUR": "25.00"}
    alice.agent.save(update_fields=["limit_amount_per_day"])
    first = charge(alice, "a", amount="20.00")
    second = charge(alice, "b", amount="5.01")
    in_dollars = charge(alice, "c", amount="900.00", currency="USD")
    _raw_claim(first["id"])

    limit = _refused_raw_claim(second["id"])

    assert limit["which"] == f"agent:{alice.agent.name}:amount_per_day:EUR"
    assert (limit["current"], limit["max"], limit["currency"]) == ("20.00", "25.00", "EUR")
    assert list(AmountCharge.objects.values_list("effect_id", "amount_minor")) == [
        (stored(first).id, 2000)
    ]
    # The agent's limit caps euros only.
    _raw_claim(in_dollars["id"])
    assert stored(in_dollars).status == Status.DISPATCHING


def test_an_effect_inserted_already_dispatching_is_counted_and_refused(alice):
    """An intent written with its claim as one INSERT meets the same trigger."""
    Tool.objects.filter(name="charge_card").update(**PATHS, limit_claims_per_minute=1)
    template = stored(charge(alice, "template"))

    def insert(step: str) -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            # A copy of the template, inserted as an intent with its claim would be.
            cursor.execute(
                f"INSERT INTO {_EFFECTS} SELECT (jsonb_populate_record(NULL::{_EFFECTS}, "
                "to_jsonb(e) || jsonb_build_object('id', gen_random_uuid(), "
                "'status', 'dispatching', 'attempt', 1, 'step_id', %s, "
                "'effect_key', e.effect_key || %s, 'idempotency_key', e.idempotency_key || %s, "
                "'lease_token', 't', 'lease_owner', 'o', 'lease_seconds', 60, "
                "'lease_expires_at', now() + interval '60 seconds'))).* "
                f"FROM {_EFFECTS} e WHERE e.id = %s",
                [step, step, step, template.id],
            )

    insert("x")
    with pytest.raises(DatabaseError) as caught:
        insert("y")
    limit = refusal_from_trigger(caught.value).extra["limit"]
    assert limit["which"] == "tool:charge_card:claims_per_minute"
    assert Effect.objects.filter(step_id="y").count() == 0


def test_the_refusal_detail_is_json_with_the_window(alice):
    Tool.objects.filter(name="charge_card").update(**PATHS, limit_claims_per_minute=1)
    _raw_claim(charge(alice, "a")["id"])
    with pytest.raises(DatabaseError) as caught:
        _raw_claim(charge(alice, "b")["id"])
    detail = json.loads(caught.value.__cause__.diag.message_detail)
    assert set(detail) == {"which", "current", "max", "retry_after", "window", "currency"}
    assert 1 <= detail["retry_after"] <= 60
