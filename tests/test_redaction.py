"""Sensitive values are tokenized before they are stored (docs/auditors.md#redaction).

Card numbers (Luhn-valid runs of 13–19 digits, grouped or not, inside text or as JSON numbers),
secret-named fields and per-tool paths become keyed tokens: equal values give equal tokens, the
raw value never reaches the database. The request hash is taken over the raw request, so two
different cards are still two different requests, and numbers stay exact.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from ledger.models import Effect
from ledger.policy.redaction import Redactor, scrub_cards

VISA = "4111111111111111"
MASTERCARD = "5555555555554444"
AMEX = "378282246310005"
VISA_13 = "4222222222222"
DINERS = "30569309025904"


def luhn_check_digit(body: str) -> str:
    """The digit that makes `body` + digit pass the Luhn check (written here, not imported, so
    that a bug in the product's Luhn check cannot hide in the tests)."""
    total = 0
    for index, char in enumerate(reversed(body)):
        value = int(char) * (2 if index % 2 == 0 else 1)
        total += value - 9 if value > 9 else value
    return str((10 - total % 10) % 10)


def card_of_length(length: int) -> str:
    body = "4" + "7" * (length - 2)
    return body + luhn_check_digit(body)


def not_luhn(card: str) -> str:
    """The same number with its check digit off by one: not a card number."""
    return card[:-1] + str((int(card[-1]) + 1) % 10)


# A millisecond timestamp (2023-11-14) that happens to pass the Luhn check.
TIMESTAMP_MS = "170000000000" + luhn_check_digit("170000000000")

REDACT = Redactor()


def assert_hidden(digits: str, value: Any) -> None:
    assert digits not in json.dumps(value, default=str).replace(" ", "").replace("-", "")


def test_the_helpers_make_what_they_say():
    assert [len(card_of_length(n)) for n in (13, 19)] == [13, 19]
    assert luhn_check_digit(VISA[:-1]) == VISA[-1]
    assert luhn_check_digit(AMEX[:-1]) == AMEX[-1]
    assert luhn_check_digit(TIMESTAMP_MS[:-1]) == TIMESTAMP_MS[-1]
    assert luhn_check_digit(not_luhn(VISA)[:-1]) != not_luhn(VISA)[-1]


# --- Card numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize("length", range(13, 20))
def test_a_luhn_valid_number_of_13_to_19_digits_is_tokenized(length):
    card = card_of_length(length)
    assert card not in scrub_cards(card)
    assert card not in json.dumps(REDACT({"number": card}))


@pytest.mark.parametrize("card", [VISA, MASTERCARD, AMEX, VISA_13, DINERS])
def test_real_world_test_cards_are_tokenized(card):
    assert_hidden(card, REDACT({"pan_text": card, "nested": [{"deep": card}]}))


@pytest.mark.parametrize(
    "written",
    [
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "4111 1111-1111 1111",
        "3782 822463 10005",
        "5555-5555-5555-4444",
    ],
)
def test_a_spaced_or_hyphenated_card_number_is_tokenized(written):
    redacted = scrub_cards(written)
    assert_hidden(written.replace(" ", "").replace("-", ""), redacted)


@pytest.mark.parametrize(
    ("before", "card", "after"),
    [
        ("charge ", VISA, " for order 17"),
        ("card:", MASTERCARD, ""),
        ("(", "4111 1111 1111 1111", ") exp 12/30"),
        ("ref_", AMEX, "_x"),
        ("Customer paid with ", "5555-5555-5555-4444", ", thanks!"),
    ],
)
def test_a_card_number_inside_a_longer_string_is_tokenized_and_the_rest_kept(before, card, after):
    redacted = scrub_cards(before + card + after)
    assert redacted.startswith(before)
    assert redacted.endswith(after)
    assert_hidden(card.replace(" ", "").replace("-", ""), redacted)


def test_two_card_numbers_in_one_string_are_both_tokenized():
    redacted = scrub_cards(f"old {VISA}, new {MASTERCARD}.")
    assert VISA not in redacted and MASTERCARD not in redacted
    assert redacted.startswith("old ") and ", new " in redacted and redacted.endswith(".")


@pytest.mark.parametrize("card", [VISA, AMEX, VISA_13, card_of_length(19)])
def test_a_card_number_sent_as_a_json_integer_is_tokenized(card):
    redacted = REDACT({"number": int(card), "list": [int(card)]})
    assert redacted["number"] != int(card)
    assert redacted["list"][0] != int(card)
    assert_hidden(card, redacted)


@pytest.mark.parametrize(
    "number",
    [Decimal(f"{VISA}.0"), Decimal("4.111111111111111E+15")],
    ids=["with .0", "in exponent form"],
)
def test_a_card_number_sent_as_a_non_integer_json_number_is_tokenized(number):
    redacted = REDACT({"number": number})
    assert not (isinstance(redacted["number"], Decimal) and redacted["number"] == int(VISA))


def test_a_card_number_used_as_an_object_key_is_tokenized():
    redacted = REDACT({"cards": {VISA: {"label": "main"}}})
    assert VISA not in json.dumps(redacted)


@pytest.mark.parametrize("card", [MASTERCARD, AMEX])
def test_a_card_number_in_full_width_digits_is_tokenized(card):
    full_width = "".join(chr(0xFF10 + int(c)) for c in card)
    assert scrub_cards(f"card {full_width}") != f"card {full_width}"


@pytest.mark.parametrize("number", [not_luhn(VISA), not_luhn(AMEX), not_luhn(card_of_length(19))])
def test_a_luhn_invalid_number_is_kept(number):
    assert scrub_cards(f"order {number}") == f"order {number}"
    assert REDACT({"number": int(number), "text": number}) == {
        "number": int(number),
        "text": number,
    }


@pytest.mark.parametrize(
    "run", ["41111111111111111111", "4111111111111111000000", "12345678901234567890123456"]
)
def test_a_digit_run_longer_than_19_is_not_a_card(run):
    assert scrub_cards(f"id {run}") == f"id {run}"
    assert REDACT({"reference": int(run)}) == {"reference": int(run)}


def test_a_13_digit_millisecond_timestamp_under_an_allow_listed_field_is_kept():
    allowing = Redactor.for_tool(card_scan_allow=["timestamp_ms"])
    request = {"timestamp_ms": int(TIMESTAMP_MS), "created": {"timestamp_ms": TIMESTAMP_MS}}
    assert allowing(request) == request
    # The allow-list is what keeps it: under any other name the same digits are a card.
    assert_hidden(TIMESTAMP_MS, allowing({"sent_at_ms": int(TIMESTAMP_MS)}))
    assert_hidden(TIMESTAMP_MS, REDACT(request))


def test_the_allow_list_exempts_a_field_from_the_card_scan_not_from_secret_names():
    allowing = Redactor.for_tool(card_scan_allow=["token"])
    assert allowing({"token": "tok_live_abc"})["token"] != "tok_live_abc"


def test_ordinary_fields_are_kept_exactly():
    request = {
        "amount": Decimal("10.10"),
        "currency": "EUR",
        "quantity": 3,
        "note": "order 17, delivery 2024-05-01",
        "flags": [True, False, None],
        "phone": "+44 20 7946 0958",
    }
    assert REDACT(request) == request


# --- Secrets by name, and configured paths ------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "cvv",
        "cvc",
        "CVV2",
        "password",
        "passwd",
        "api_key",
        "apiKey",
        "API-Key",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh-token",
        "authorization",
        "security_code",
        "card_number",
        "pin",
    ],
)
def test_a_field_named_like_a_secret_is_tokenized(name):
    for value in ("s3cr3t-value", 737, {"nested": "s3cr3t-value"}, ["s3cr3t-value"]):
        redacted = REDACT({"payment": {name: value}, "amount": "10.00"})
        assert redacted["payment"][name] != value
        assert "s3cr3t-value" not in json.dumps(redacted)
        assert redacted["amount"] == "10.00"


@pytest.mark.parametrize("name", ["token_type", "description", "pinned", "secretary_name", "card"])
def test_a_field_whose_name_only_contains_a_secret_word_is_kept(name):
    assert REDACT({name: "visible"}) == {name: "visible"}


def test_configured_paths_are_tokenized_and_their_neighbours_kept():
    redactor = Redactor.for_tool(redact_paths=["customer.tax_id", "items.*.iban"])
    redacted = redactor(
        {
            "customer": {"tax_id": "DE123456789", "name": "Ada"},
            "items": [{"iban": "DE89370400440532013000", "amount": 5}, {"iban": "GB29NWBK"}],
            "tax_id": "kept: not at the configured path",
        }
    )
    assert redacted["customer"]["tax_id"] != "DE123456789"
    assert redacted["customer"]["name"] == "Ada"
    assert [item["iban"] for item in redacted["items"]] != ["DE89370400440532013000", "GB29NWBK"]
    assert "DE89370400440532013000" not in json.dumps(redacted)
    assert redacted["items"][0]["amount"] == 5
    assert redacted["tax_id"] == "kept: not at the configured path"


def test_a_configured_path_holding_an_object_is_tokenized_whole():
    redactor = Redactor.for_tool(redact_paths=["customer.address"])
    redacted = redactor({"customer": {"address": {"street": "1 Main St", "zip": "12345"}}})
    assert isinstance(redacted["customer"]["address"], str)
    assert "Main St" not in json.dumps(redacted)


# --- Tokens --------------------------------------------------------------------------------------


def test_equal_values_give_equal_tokens_and_different_values_different_tokens():
    first = REDACT({"a": VISA, "b": "4111 1111 1111 1111", "c": MASTERCARD, "d": int(VISA)})
    assert first["a"] == first["b"] == first["d"]
    assert first["a"] != first["c"]
    again = REDACT({"z": f"paid with {VISA}"})
    assert first["a"] in again["z"]

    secrets = REDACT({"password": "hunter2", "nested": {"password": "hunter2"}, "cvv": "hunter3"})
    assert secrets["password"] == secrets["nested"]["password"]
    assert secrets["password"] != secrets["cvv"]


# --- Through the API ------------------------------------------------------------------------------


def stored(effect_id: str) -> Effect:
    return Effect.objects.get(pk=effect_id)


def test_the_stored_request_holds_no_raw_card_number_or_secret(alice):
    request = {
        "amount": "10.00",
        "card": {"number": "4111 1111 1111 1111", "cvc": "737", "holder": "Ada Lovelace"},
        "backup": f"use {MASTERCARD} if declined",
        "alternative": int(AMEX),
        "customer": {"tax_id": "DE123456789", "email": "ada@example.com"},
    }
    response = alice.post(
        "/effects",
        {"run_id": "r", "step_id": "s", "tool": "charge_card", "target": "t", "request": request},
    )
    assert response.status_code == 201, response.content
    saved = stored(response.json()["id"]).request
    text = json.dumps(saved, default=str)
    for raw in (VISA, "4111 1111 1111 1111", MASTERCARD, AMEX, "DE123456789"):
        assert raw not in text
        assert raw.encode() not in response.content
    assert saved["card"]["cvc"] != "737"
    assert saved["amount"] == "10.00"
    assert saved["card"]["holder"] == "Ada Lovelace"
    assert saved["backup"].startswith("use ") and saved["backup"].endswith(" if declined")
    assert saved["customer"]["email"] == "ada@example.com"
    assert response.json()["request"] == json.loads(json.dumps(saved, default=str))


def test_the_tools_allow_list_keeps_a_timestamp_that_another_tool_would_tokenize(alice):
    request = {"timestamp_ms": int(TIMESTAMP_MS), "amount": "1.00"}
    kept = alice.intent(step_id="charge", tool="charge_card", request=request)
    assert stored(kept["id"]).request["timestamp_ms"] == int(TIMESTAMP_MS)
    scanned = alice.intent(step_id="email", tool="send_email", request=request)
    assert stored(scanned["id"]).request["timestamp_ms"] != int(TIMESTAMP_MS)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"card": VISA}, {"card": MASTERCARD}),
        ({"card": int(VISA)}, {"card": int("4012888888881881")}),
        ({"card": VISA, "cvc": "737"}, {"card": VISA, "cvc": "738"}),
        ({"password": "hunter2"}, {"password": "hunter3"}),
        ({"card": "4111 1111 1111 1111"}, {"card": VISA}),
    ],
    ids=["two cards", "two cards as numbers", "two cvcs", "two passwords", "spacing differs"],
)
def test_the_request_hash_tells_apart_requests_whose_stored_forms_hide_the_difference(
    alice, first, second
):
    body = {"run_id": "r", "step_id": "pay", "tool": "charge_card", "target": "acct_42"}
    created = alice.post("/effects", {**body, "request": {"amount": "10.00", **first}})
    assert created.status_code == 201, created.content
    repeat = alice.post("/effects", {**body, "request": {"amount": "10.00", **first}})
    assert repeat.status_code == 200
    assert repeat.json()["id"] == created.json()["id"]
    conflict = alice.post("/effects", {**body, "request": {"amount": "10.00", **second}})
    assert conflict.status_code == 409, conflict.content
    assert conflict.json()["error"] == "effect_key_conflict"
    assert Effect.objects.filter(agent=alice.agent).count() == 1


def _intent_text(amount_json: str, step_id: str = "pay") -> str:
    return (
        f'{{"run_id": "r", "step_id": "{step_id}", "tool": "charge_card", "target": "acct_42", '
        f'"request": {{"amount": {amount_json}, "currency": "EUR"}}}}'
    )


@pytest.mark.parametrize("amount", ["10.10", "0.10", "12345678901234567.89", "-0.000001", "100"])
def test_an_exact_decimal_survives_the_round_trip(alice, amount):
    created = alice.post("/effects", raw=_intent_text(amount))
    assert created.status_code == 201, created.content
    assert f'"amount":{amount},'.encode() in created.content
    shown = alice.get(f"/effects/{created.json()['id']}")
    assert f'"amount":{amount},'.encode() in shown.content
    saved = stored(created.json()["id"]).request["amount"]
    assert str(saved) == amount
    assert not isinstance(saved, float)


def test_an_exact_decimal_in_an_outcome_response_survives_the_round_trip(alice):
    effect = alice.intent(claim=True)
    raw = (
        f'{{"lease_token": "{effect["lease_token"]}", "status": "confirmed", '
        f'"response": {{"captured": 10.10}}}}'
    )
    response = alice.post(f"/effects/{effect['id']}/outcome", raw=raw)
    assert response.status_code == 200, response.content
    assert b'"captured":10.10' in response.content
    assert str(stored(effect["id"]).response["captured"]) == "10.10"


def test_amounts_equal_as_binary_floats_are_still_different_requests(alice):
    """10.000000000000001 and 10.000000000000002 are the same double; not the same amount."""
    assert float("10.000000000000001") == float("10.000000000000002")
    assert alice.post("/effects", raw=_intent_text("10.000000000000001")).status_code == 201
    conflict = alice.post("/effects", raw=_intent_text("10.000000000000002"))
    assert conflict.status_code == 409, conflict.content
    assert conflict.json()["error"] == "effect_key_conflict"


def test_a_digit_run_glued_to_letters_in_an_identifier_is_not_a_card():
    from ledger.policy.redaction import scrub_cards

    # A provider's hex charge id can hold a Luhn-valid run of 16 digits.
    assert scrub_cards("ch_ab4111111111111111cd") == "ch_ab4111111111111111cd"
    assert scrub_cards("ch_4111111111111111").startswith("ch_[card:")
