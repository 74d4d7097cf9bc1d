"""Business keys (`key_fields`): the server derives the effect key from the request fields that
identify the action, so a call re-issued under a new call id, or with 25.0 for 25, is the same
effect; the key is keyed (HMAC), never a plain hash of the values."""

from __future__ import annotations

import hashlib

import pytest

from ledger.models import Effect, Tool
from ledger.policy.toolfile import ToolFileError, load
from tests.helpers import assert_error

ORDER = {"order_id": 25, "amount": "10.00", "currency": "EUR"}


@pytest.fixture
def keyed(tools):
    Tool.objects.filter(name="charge_card").update(key_fields=["order_id"])


def test_a_new_call_id_for_the_same_order_is_the_same_effect(alice, keyed):
    first = alice.intent("thread-1", "call_a", request=ORDER)
    again = alice.intent("thread-1", "call_b", request={**ORDER, "order_id": 25.0}, expect=200)

    assert again["id"] == first["id"]
    assert again["idempotency_key"] == first["idempotency_key"]
    assert Effect.objects.count() == 1


def test_another_order_is_another_effect_and_the_key_holds_no_plain_hash(alice, keyed):
    first = alice.intent("thread-1", "call_a", request=ORDER)
    other = alice.intent("thread-1", "call_b", request={**ORDER, "order_id": 26})

    assert other["id"] != first["id"]
    key = Effect.objects.get(pk=first["id"]).effect_key
    assert key.startswith("key:charge_card:")
    for plain in ("25", '{"order_id":25}', "[25]"):
        assert hashlib.sha256(plain.encode()).hexdigest()[:16] not in key


def test_the_same_order_with_another_amount_is_a_conflict(alice, keyed):
    alice.intent("thread-1", "call_a", request=ORDER)
    response = alice.post(
        "/effects",
        {
            "run_id": "thread-1",
            "step_id": "call_b",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {**ORDER, "amount": "11.00"},
        },
    )
    assert_error(response, 409, "effect_key_conflict")


def test_a_request_without_the_key_field_is_refused_and_writes_nothing(alice, keyed):
    body = {"run_id": "r", "step_id": "s", "tool": "charge_card", "target": "acct_42"}
    response = alice.post("/effects", {**body, "request": {"amount": "10.00"}})
    assert_error(response, 422, "validation_error")
    assert "request.order_id" in response.json()["fields"]

    response = alice.post("/effects", {**body, "request": ORDER, "effect_key": "mine"})
    assert_error(response, 422, "validation_error")
    assert "effect_key" in response.json()["fields"]
    assert Effect.objects.count() == 0


def test_a_tool_without_a_business_key_keys_by_run_and_step(alice, tools):
    first = alice.intent("thread-1", "call_a", request=ORDER)
    second = alice.intent("thread-1", "call_b", request=ORDER)
    assert first["id"] != second["id"]


@pytest.mark.parametrize(
    "value",
    [["order id"], ["a", "a"], "order_id", [""], [f"f{n}" for n in range(11)]],
)
def test_the_tool_file_refuses_a_bad_business_key(db, tmp_path, value):
    path = tmp_path / "tools.toml"
    path.write_text(f"[tools.t]\npreset = \"idempotent\"\nkey_fields = {_toml(value)}\n")
    with pytest.raises(ToolFileError, match="key_fields"):
        load(path)


def test_the_tool_file_takes_a_business_key(db, tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text('[tools.t]\npreset = "idempotent"\nkey_fields = ["order.id", "line"]\n')
    load(path)
    assert Tool.objects.get(name="t").key_fields == ["order.id", "line"]


def _toml(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return "[" + ", ".join(f'"{v}"' for v in value) + "]"
