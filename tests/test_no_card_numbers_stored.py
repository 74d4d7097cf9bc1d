"""No card number reaches the database, whichever field of whichever request carried it.

Each test runs a payment flow through the API with card numbers in the request, target,
provenance, outcome, reason and callback fields where payment data ends up, then reads back
every row of every table in the database as JSON text and looks for any Luhn-valid run of
13–19 digits. The scanner is written here, independently of
`ledger.policy.redaction`, and is itself tested on a table we fill by hand.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from django.db import connection
from django.test import Client

from ledger.api import webhooks
from ledger.models import Effect, EffectEvent

VISA = "4111111111111111"
MASTERCARD = "5555555555554444"
AMEX = "378282246310005"
DISCOVER = "6011111111111117"
VISA_13 = "4222222222222"
DINERS = "30569309025904"
JCB = "3530111333300000"
CARDS = (VISA, MASTERCARD, AMEX, DISCOVER, VISA_13, DINERS, JCB)

# Digit groups joined by single spaces or hyphens, not part of a longer alphanumeric word, so
# that hex digests (request hashes, redaction tokens) are not read as card numbers.
_DIGIT_RUN = re.compile(r"(?<![0-9A-Za-z])[0-9]+(?:[ -][0-9]+)*(?![0-9A-Za-z])")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SEPARATOR_BETWEEN_DIGITS = re.compile(r"(?<=[0-9])[ -](?=[0-9])")


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def card_numbers_in(text: str) -> set[str]:
    """Every Luhn-valid 13–19 digit number in `text`, spaced, hyphenated or not, and every
    known test card even where it is glued to letters."""
    text = _UUID.sub("<uuid>", text)
    found = set()
    for match in _DIGIT_RUN.finditer(text):
        groups = re.split(r"[ -]", match.group())
        # Any consecutive groups may form the card ("card 4111 1111 1111 1111 exp 12 30").
        for start in range(len(groups)):
            digits = ""
            for group in groups[start:]:
                digits += group
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and luhn_valid(digits):
                    found.add(digits)
    joined = _SEPARATOR_BETWEEN_DIGITS.sub("", text)
    found.update(card for card in CARDS if re.search(rf"(?<![0-9]){card}(?![0-9])", joined))
    return found


def stored_card_numbers() -> dict[str, set[str]]:
    """Card numbers found in any row of any table of the `public` schema, by table."""
    found: dict[str, set[str]] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
        tables = [name for (name,) in cursor.fetchall()]
        assert "ledger_effect" in tables and "ledger_effectevent" in tables
        for table in tables:
            cursor.execute(f"SELECT row_to_json(t)::text FROM {connection.ops.quote_name(table)} t")
            for (row,) in cursor.fetchall():
                cards = card_numbers_in(row)
                if cards:
                    found.setdefault(table, set()).update(cards)
    return found


def ledger_rows() -> int:
    return Effect.objects.count() + EffectEvent.objects.count()


# --- The scanner itself ---------------------------------------------------------------------


def test_the_scanner_finds_cards_written_into_a_table_by_hand(db):
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE scanner_canary (note text, doc jsonb, code varchar(40))")
        cursor.execute(
            "INSERT INTO scanner_canary VALUES (%s, %s::jsonb, %s), (%s, %s::jsonb, %s)",
            [
                "paid with 4111 1111 1111 1111 yesterday",
                json.dumps({"pan": int(MASTERCARD)}),
                "ref_378282246310005",
                "x",
                json.dumps({"deep": [{"card": "6011-1111-1111-1117"}]}),
                "ch" + JCB,
            ],
        )
    assert stored_card_numbers() == {"scanner_canary": {VISA, MASTERCARD, AMEX, DISCOVER, JCB}}


@pytest.mark.parametrize(
    "text",
    [
        "4111111111111112",
        "order 1234567890123",
        "id 41111111111111111111",
        "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "uuid 12345678-1234-4234-8234-123456789012",
        "at 2024-05-01T10:00:00.123456+00:00, amount 10.10",
        "[card:9c08c04d49b898c474a571f7]",
    ],
)
def test_the_scanner_ignores_what_is_not_a_card(text):
    assert card_numbers_in(text) == set()


@pytest.mark.parametrize(
    ("text", "card"),
    [
        (VISA, VISA),
        ("5555-5555-5555-4444", MASTERCARD),
        ("3782 822463 10005", AMEX),
        (f'{{"n": {VISA_13}}}', VISA_13),
        (f"card:{DINERS}.", DINERS),
        (f"card {VISA} exp 12 30", VISA),
        (f"tok{VISA}", VISA),
    ],
)
def test_the_scanner_finds_a_card_however_it_is_written(text, card):
    assert card in card_numbers_in(text)


# --- Payment flows through the API --------------------------------------------------------


def test_an_intent_with_card_data_everywhere_stores_none(alice):
    before = ledger_rows()
    effect = alice.intent(
        step_id="charge",
        target=f"card {VISA_13}",
        request={
            "amount": "10.00",
            "card": {"number": "4111 1111 1111 1111", "cvc": "737", "exp": "12/30"},
            "note": f"fallback card {MASTERCARD}",
            "backup_number": int(AMEX),
            "cards": [DISCOVER, {"number": "6011-1111-1111-1117"}],
        },
        provenance={
            "model": "gpt-test",
            "prompt_hash": "abc",
            "model_output": f"I will charge the card {JCB} for 10.00",
            "policy": {"why": f"customer gave {DINERS}"},
        },
        claim=True,
        claim_id="c1",
    )
    assert effect["status"] == "dispatching"
    assert ledger_rows() > before
    assert stored_card_numbers() == {}


def test_outcomes_with_card_data_in_response_error_and_provider_ref_store_none(alice):
    confirmed = alice.intent(step_id="confirmed", claim=True)
    alice.outcome(
        confirmed["id"],
        confirmed["lease_token"],
        "confirmed",
        provider_ref=f"ch_{VISA}",
        response={"id": "ch_1", "card": {"number": MASTERCARD}, "echo": f"charged {AMEX}"},
    )
    failed = alice.intent(step_id="failed", claim=True)
    alice.outcome(
        failed["id"],
        failed["lease_token"],
        "failed",
        provider_ref=f"{DISCOVER}",
        error="card 4222-2222-2222-2 declined",
    )
    structured = alice.intent(step_id="structured", claim=True)
    alice.outcome(
        structured["id"],
        structured["lease_token"],
        "failed",
        error={"code": "card_declined", "card": int(JCB), "message": f"{DINERS} expired"},
    )
    parked = alice.intent(step_id="parked", claim=True)
    alice.outcome(
        parked["id"],
        parked["lease_token"],
        "awaiting_confirmation",
        provider_ref=f"pi {VISA}",
        response={"pending": True, "card": VISA},
    )
    alice.outcome(
        parked["id"], parked["lease_token"], "confirmed", response={"card_used": MASTERCARD}
    )
    assert stored_card_numbers() == {}


def test_a_late_outcome_with_card_data_stores_none(alice):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    late = alice.post(
        f"/effects/{effect['id']}/outcome",
        {
            "lease_token": effect["lease_token"],
            "status": "failed",
            "provider_ref": f"ch_{VISA}",
            "response": {"card": MASTERCARD},
            "error": f"retry with {AMEX}",
        },
    )
    assert late.status_code == 409
    assert late.json()["error"] == "stale_lease"
    # The late report is kept as evidence (and opens a review: the references differ).
    assert EffectEvent.objects.filter(effect_id=effect["id"], kind="late_outcome").count() == 1
    assert stored_card_numbers() == {}


def test_a_cancel_with_a_card_number_in_its_reason_stores_none(alice):
    effect = alice.intent()
    response = alice.post(
        f"/effects/{effect['id']}/cancel", {"reason": f"customer used {VISA}, not allowed"}
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    assert stored_card_numbers() == {}


def test_a_compensation_whose_request_holds_a_card_stores_none(alice):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    response = alice.post(
        f"/effects/{effect['id']}/compensate",
        {
            "request": {"charge": "ch_1", "refund_to": {"card_number": VISA}, "note": MASTERCARD},
            "reason": "refund",
            "compensation_key": "refund-1",
        },
    )
    assert response.status_code == 201, response.content
    compensation = response.json()
    assert compensation["parent_id"] == effect["id"]
    claimed = alice.claim(compensation["id"])
    alice.outcome(
        compensation["id"],
        claimed["lease_token"],
        response={"refunded_to": f"card {AMEX}"},
        provider_ref="re_1",
    )
    assert alice.get(f"/effects/{effect['id']}").json()["status"] == "compensated"
    assert stored_card_numbers() == {}


def test_a_compensation_with_a_card_number_in_its_reason_stores_none(alice):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    response = alice.post(
        f"/effects/{effect['id']}/compensate", {"reason": f"refund to {VISA} please"}
    )
    assert response.status_code == 201, response.content
    assert stored_card_numbers() == {}


def test_a_provider_webhook_with_card_data_stores_none(alice, settings):
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "awaiting_confirmation")
    body = json.dumps(
        {
            "idempotency_key": effect["idempotency_key"],
            "status": "confirmed",
            "provider_ref": f"ch_{VISA}",
            # The charge as the provider recorded it (it matches the request), plus card data.
            "response": {
                "id": f"ch_{VISA}",
                "status": "succeeded",
                "amount": "10.00",
                "currency": "EUR",
                "account": "acct_42",
                "card": MASTERCARD,
                "receipt": f"paid with {AMEX}",
            },
        }
    ).encode()
    secret = "card-test-webhook-secret-0123"
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": secret}
    response = Client().post(
        "/api/v1/webhooks/sandbox-pay",
        body,
        content_type="application/json",
        headers={"X-Ledger-Signature": webhooks.sign(secret, int(time.time()), body)},
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "confirmed"
    assert stored_card_numbers() == {}


def _intent_with_request_text(client, request_json: str) -> None:
    response = client.post(
        "/effects",
        raw='{"run_id": "run-1", "step_id": "step-1", "tool": "charge_card", '
        f'"target": "acct_42", "request": {request_json}}}',
    )
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("number", ["4.111111111111111E+15", f"{MASTERCARD}.0"])
def test_an_intent_with_a_card_as_a_non_integer_json_number_stores_none(alice, number):
    _intent_with_request_text(alice, f'{{"amount": "10.00", "value": {number}}}')
    assert stored_card_numbers() == {}


def test_an_intent_with_a_card_as_an_object_key_stores_none(alice):
    _intent_with_request_text(alice, f'{{"amount": "10.00", "cards": {{"{VISA}": "main"}}}}')
    assert stored_card_numbers() == {}


def test_a_refused_request_with_card_data_stores_none(alice):
    """A request refused after the body was read must not leave the card behind either."""
    effect = alice.intent(request={"amount": "10.00", "card": VISA})
    conflict = alice.post(
        "/effects",
        {
            "run_id": "run-1",
            "step_id": "step-1",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "10.00", "card": MASTERCARD},
        },
    )
    assert conflict.status_code == 409
    invalid = alice.post(f"/effects/{effect['id']}/claim", {"owner": AMEX, "lease_seconds": 0})
    assert invalid.status_code == 422
    assert stored_card_numbers() == {}
