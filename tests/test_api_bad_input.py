"""Bad input gets the documented 4xx JSON error, and nothing is half-written (docs/api.md#errors).

No request can produce a 500 by its content: malformed JSON, wrong types, missing or unknown
fields, strings over their limits, values PostgreSQL cannot store, bodies over the size limit,
non-UUID ids and bad cursors are all refused before anything is recorded.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from ledger.models import Effect, EffectDependency, EffectEvent, Run
from tests.helpers import ROOT, assert_error

INTENT = {
    "run_id": "run-1",
    "step_id": "step-1",
    "tool": "charge_card",
    "target": "acct_42",
    "request": {"amount": "10.00", "currency": "EUR"},
}

# Every endpoint that takes a body; `{id}` is filled with an effect of the caller's.
BODY_ENDPOINTS = [
    "/effects",
    "/effects/{id}/claim",
    "/effects/{id}/heartbeat",
    "/effects/{id}/outcome",
    "/effects/{id}/cancel",
    "/effects/{id}/compensate",
    "/recovery",
]


def _counts() -> dict[str, int]:
    return {
        "effects": Effect.objects.count(),
        "events": EffectEvent.objects.count(),
        "runs": Run.objects.count(),
        "dependencies": EffectDependency.objects.count(),
    }


def _versions() -> dict[Any, tuple[str, int]]:
    return {e.id: (e.status, e.version) for e in Effect.objects.all()}


@contextmanager
def nothing_written() -> Iterator[None]:
    """Assert that the block leaves every effect, event, run and dependency as it found them."""
    counts, versions = _counts(), _versions()
    yield
    assert _counts() == counts
    assert _versions() == versions


def assert_refused_field(response, field: str) -> None:
    body = assert_error(response, 422, "validation_error")
    assert field in body["fields"], body["fields"]
    assert body["fields"][field]


def cursor_of(value: Any) -> str:
    """`value` in the cursor encoding the API used before its cursors had a declared pattern
    (URL-safe base64 of JSON): refused now, as any string outside the pattern."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def intent_text(request_json: str) -> str:
    """An otherwise valid intent whose `request` is the given JSON text, written as is."""
    return (
        '{"run_id": "run-1", "step_id": "step-1", "tool": "charge_card", '
        f'"target": "acct_42", "request": {request_json}}}'
    )


@pytest.fixture
def effect(alice) -> dict[str, Any]:
    """Alice's effect, claimed: the lease token is in `lease_token`."""
    return alice.intent(claim=True, claim_id="c1")


# --- Malformed JSON -------------------------------------------------------------------------


@pytest.mark.parametrize("path", BODY_ENDPOINTS)
@pytest.mark.parametrize("text", ['{"run_id": ', "{bad}", "not json", "{'a': 1}", "[1,]"])
def test_it_refuses_malformed_json_on_every_endpoint(alice, effect, path, text):
    with nothing_written():
        response = alice.post(path.format(id=effect["id"]), raw=text)
    assert_error(response, 400, "malformed_json")


@pytest.mark.parametrize("path", BODY_ENDPOINTS)
def test_it_refuses_a_body_that_is_not_utf8(alice, effect, path):
    with nothing_written():
        response = alice.post(path.format(id=effect["id"]), raw=b'{"run_id": "\xff\xfe"}')
    assert_error(response, 400, "malformed_json")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_it_refuses_nan_and_infinity_which_json_does_not_have(alice, constant):
    with nothing_written():
        response = alice.post("/effects", raw=intent_text(f'{{"amount": {constant}}}'))
    assert_error(response, 400, "malformed_json")


@pytest.mark.parametrize("path", BODY_ENDPOINTS)
@pytest.mark.parametrize("text", ["[]", '"text"', "42", "null"])
def test_it_refuses_a_body_that_is_not_an_object(alice, effect, path, text):
    with nothing_written():
        response = alice.post(path.format(id=effect["id"]), raw=text)
    assert_error(response, 422, "validation_error")


# --- Wrong types, missing and unknown fields, limits ----------------------------------------

INTENT_CASES = [
    ("missing run_id", {"run_id": None}, "run_id"),
    ("missing request", {"request": None}, "request"),
    ("run_id a number", {"run_id": 123}, "run_id"),
    ("run_id empty", {"run_id": ""}, "run_id"),
    ("run_id 201 chars", {"run_id": "r" * 201}, "run_id"),
    ("step_id 201 chars", {"step_id": "s" * 201}, "step_id"),
    ("tool 101 chars", {"tool": "t" * 101}, "tool"),
    ("target 501 chars", {"target": "a" * 501}, "target"),
    ("target a list", {"target": ["acct_42"]}, "target"),
    ("effect_key 401 chars", {"effect_key": "k" * 401}, "effect_key"),
    ("owner 201 chars", {"owner": "o" * 201}, "owner"),
    ("claim_id 201 chars", {"claim_id": "c" * 201}, "claim_id"),
    ("request a list", {"request": [1, 2]}, "request"),
    ("request a string", {"request": "amount=10"}, "request"),
    ("claim an object", {"claim": {"yes": True}}, "claim"),
    ("lease_seconds 0", {"lease_seconds": 0}, "lease_seconds"),
    ("lease_seconds 3601", {"lease_seconds": 3601}, "lease_seconds"),
    ("lease_seconds -5", {"lease_seconds": -5}, "lease_seconds"),
    ("lease_seconds fractional", {"lease_seconds": 1.5}, "lease_seconds"),
    ("lease_seconds text", {"lease_seconds": "abc"}, "lease_seconds"),
    ("depends_on not a list", {"depends_on": "e1"}, "depends_on"),
    ("depends_on not UUIDs", {"depends_on": ["not-a-uuid"]}, "depends_on.0"),
    ("depends_on 101 ids", {"depends_on": [str(uuid.uuid4()) for _ in range(101)]}, "depends_on"),
    ("provenance a list", {"provenance": ["gpt"]}, "provenance"),
    ("provenance unknown field", {"provenance": {"temperature": 0.2}}, "provenance.temperature"),
    ("provenance.model 201 chars", {"provenance": {"model": "m" * 201}}, "provenance.model"),
    ("unknown field", {"colour": "blue"}, "colour"),
    ("agent is never a body field", {"agent": "bob"}, "agent"),
]


@pytest.mark.parametrize(
    ("change", "field"),
    [pytest.param(change, field, id=name) for name, change, field in INTENT_CASES],
)
def test_it_refuses_an_invalid_intent_naming_the_field_and_records_nothing(alice, change, field):
    body = {**INTENT, "claim": True, **change}
    body = {k: v for k, v in body.items() if v is not None}
    with nothing_written():
        response = alice.post("/effects", body)
    assert_refused_field(response, field)


OTHER_CASES = [
    ("claim", {"lease_seconds": 0}, "lease_seconds"),
    ("claim", {"lease_seconds": 3601}, "lease_seconds"),
    ("claim", {"lease_seconds": "abc"}, "lease_seconds"),
    ("claim", {"owner": "o" * 201}, "owner"),
    ("claim", {"claim_id": "c" * 201}, "claim_id"),
    ("claim", {"claim_id": ""}, "claim_id"),
    ("claim", {"force": True}, "force"),
    ("heartbeat", {}, "lease_token"),
    ("heartbeat", {"lease_token": "t" * 65}, "lease_token"),
    ("heartbeat", {"lease_token": "{token}", "lease_seconds": 0}, "lease_seconds"),
    ("heartbeat", {"lease_token": "{token}", "lease_seconds": 3601}, "lease_seconds"),
    ("heartbeat", {"lease_token": 42}, "lease_token"),
    ("outcome", {"status": "confirmed"}, "lease_token"),
    ("outcome", {"lease_token": "{token}"}, "status"),
    ("outcome", {"lease_token": "{token}", "status": "done"}, "status"),
    ("outcome", {"lease_token": "{token}", "status": "CONFIRMED"}, "status"),
    ("outcome", {"lease_token": "{token}", "provider_ref": "r" * 501}, "provider_ref"),
    ("outcome", {"lease_token": "{token}", "status": "confirmed", "refund": True}, "refund"),
    ("cancel", {"reason": "r" * 2001}, "reason"),
    ("cancel", {"reason": 7}, "reason"),
    ("cancel", {"why": "changed my mind"}, "why"),
    ("compensate", {"tool": "t" * 101}, "tool"),
    ("compensate", {"compensation_key": "k" * 101}, "compensation_key"),
    ("compensate", {"request": [1]}, "request"),
    ("compensate", {"reason": "r" * 2001}, "reason"),
    ("compensate", {"amount": "10.00"}, "amount"),
    ("recovery", {"dry_run": "maybe"}, "dry_run"),
    ("recovery", {"run_id": "r" * 201}, "run_id"),
    ("recovery", {"owner": "o" * 201}, "owner"),
    ("recovery", {"everything": True}, "everything"),
]


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        pytest.param(action, body, field, id=f"{action}-{field}-{i}")
        for i, (action, body, field) in enumerate(OTHER_CASES)
    ],
)
def test_it_refuses_an_invalid_body_naming_the_field_and_changes_nothing(
    alice, effect, action, body, field
):
    body = {k: effect["lease_token"] if v == "{token}" else v for k, v in body.items()}
    path = "/recovery" if action == "recovery" else f"/effects/{effect['id']}/{action}"
    with nothing_written():
        response = alice.post(path, body)
    assert_refused_field(response, field)


@pytest.mark.parametrize("error", ["e" * 10001, 42], ids=["too long", "a number"])
def test_an_invalid_outcome_error_is_reported_under_its_own_field_name(alice, effect, error):
    body = {"lease_token": effect["lease_token"], "status": "failed", "error": error}
    with nothing_written():
        response = alice.post(f"/effects/{effect['id']}/outcome", body)
    assert_error(response, 422, "validation_error")
    assert set(response.json()["fields"]) == {"error"}


def test_the_limits_themselves_are_accepted(alice):
    """The boundaries are inside: a 200-character run_id and a 3600-second lease are fine."""
    body = {**INTENT, "run_id": "r" * 200, "claim": True, "lease_seconds": 3600}
    response = alice.post("/effects", body)
    assert response.status_code == 201, response.content
    assert response.json()["lease_seconds"] == 3600
    effect = response.json()
    heartbeat = alice.post(
        f"/effects/{effect['id']}/heartbeat",
        {"lease_token": effect["lease_token"], "lease_seconds": 1},
    )
    assert heartbeat.status_code == 200, heartbeat.content


@pytest.mark.parametrize(
    "change",
    [{"claim": "yes"}, {"claim": 1}, {"lease_seconds": "30"}, {"lease_seconds": True}],
    ids=["claim-string", "claim-number", "lease_seconds-string", "lease_seconds-boolean"],
)
def test_it_refuses_a_value_of_the_wrong_json_type_instead_of_coercing_it(alice, change):
    body = {**INTENT, "claim": False, **change}
    with nothing_written():
        response = alice.post("/effects", body)
    assert_refused_field(response, next(iter(change)))


# --- Values PostgreSQL cannot store ---------------------------------------------------------

UNSTORABLE = [
    ("NUL in a value", r'{"note": "a\u0000b"}', "request.note"),
    ("NUL in a key", r'{"a\u0000b": 1}', "request"),
    ("lone high surrogate", r'{"note": "\ud800"}', "request.note"),
    ("lone low surrogate", r'{"note": "x\udfffy"}', "request.note"),
    ("lone surrogate in a key", r'{"\udc00": 1}', "request"),
    ("NUL deep inside", r'{"items": [{"name": "\u0000"}]}', "request.items.0.name"),
    ("huge exponent", '{"amount": 1e999999}', "request.amount"),
    ("huge negative exponent", '{"amount": -1E-999999}', "request.amount"),
    ("large float", '{"amount": 1e400}', "request.amount"),
]


@pytest.mark.parametrize(
    ("request_json", "field"),
    [pytest.param(text, field, id=name) for name, text, field in UNSTORABLE],
)
def test_it_refuses_an_intent_whose_request_postgresql_cannot_store(alice, request_json, field):
    with nothing_written():
        response = alice.post("/effects", raw=intent_text(request_json))
    assert_refused_field(response, field)


@pytest.mark.parametrize(
    "text",
    [r'"a\u0000b"', r'"\ud800"', "1e999999"],
    ids=["NUL", "lone surrogate", "huge exponent"],
)
def test_it_refuses_unstorable_values_in_other_bodies_too(alice, effect, text):
    token = effect["lease_token"]
    bodies = {
        f"/effects/{effect['id']}/outcome": (
            f'{{"lease_token": "{token}", "status": "confirmed", "response": {{"id": {text}}}}}'
        ),
        f"/effects/{effect['id']}/heartbeat": f'{{"lease_token": "{token}", "x": {text}}}',
        "/recovery": f'{{"owner": {text}}}',
    }
    for path, raw in bodies.items():
        with nothing_written():
            response = alice.post(path, raw=raw)
        assert_error(response, 422, "validation_error")


@pytest.mark.parametrize("field", ["run_id", "step_id", "tool", "target", "effect_key", "owner"])
def test_it_refuses_a_nul_character_in_a_top_level_string(alice, field):
    body = json.dumps({**INTENT, field: "acct\u000042"})
    with nothing_written():
        response = alice.post("/effects", raw=body)
    assert_refused_field(response, field)


@pytest.mark.parametrize("depth", [1000, 5000, 100_000])
def test_deeply_nested_json_is_a_4xx_not_a_500(alice, effect, depth):
    nested = "[" * depth + "]" * depth
    for raw in (intent_text(f'{{"deep": {nested}}}'), nested):
        with nothing_written():
            response = alice.post("/effects", raw=raw)
        assert 400 <= response.status_code < 500, response.status_code
        assert response.json()["error"] in ("malformed_json", "validation_error")
    outcome = f'{{"lease_token": "{effect["lease_token"]}", "status": "confirmed", "response": '
    response = alice.post(f"/effects/{effect['id']}/outcome", raw=outcome + nested + "}")
    assert 400 <= response.status_code < 500, response.status_code


def test_an_integer_too_long_to_parse_is_a_4xx_not_a_500(alice):
    with nothing_written():
        response = alice.post("/effects", raw=intent_text('{"amount": ' + "9" * 5000 + "}"))
    assert 400 <= response.status_code < 500, response.status_code
    assert response.json()["error"] in ("malformed_json", "validation_error")


# --- Body size --------------------------------------------------------------------------------


def _intent_of_size(size: int) -> str:
    """A valid intent exactly `size` bytes long."""
    empty = json.dumps({**INTENT, "step_id": f"big-{size}", "request": {"pad": ""}})
    return json.dumps(
        {**INTENT, "step_id": f"big-{size}", "request": {"pad": "x" * (size - len(empty))}}
    )


def test_the_default_body_limit_is_one_mebibyte():
    assert settings.LEDGER_MAX_BODY_BYTES == 1024 * 1024


@pytest.mark.parametrize("path", BODY_ENDPOINTS)
def test_a_body_over_the_limit_is_refused_with_413(alice, effect, path):
    body = _intent_of_size(settings.LEDGER_MAX_BODY_BYTES + 1)
    with nothing_written():
        response = alice.post(path.format(id=effect["id"]), raw=body)
    assert_error(response, 413, "body_too_large")


def test_a_body_exactly_at_the_limit_is_accepted(alice):
    body = _intent_of_size(settings.LEDGER_MAX_BODY_BYTES)
    assert len(body.encode()) == settings.LEDGER_MAX_BODY_BYTES
    response = alice.post("/effects", raw=body)
    assert response.status_code == 201, response.content[:300]


def test_a_lowered_body_limit_is_obeyed(alice):
    with override_settings(LEDGER_MAX_BODY_BYTES=2048):
        with nothing_written():
            response = alice.post("/effects", raw=_intent_of_size(2049))
        assert_error(response, 413, "body_too_large")
        assert alice.post("/effects", raw=_intent_of_size(2048)).status_code == 201


_RAISED_LIMIT_SCRIPT = """
import django, json
django.setup()
from django.test import Client
body = json.dumps({"idempotency_key": "el_x", "status": "confirmed", "pad": "x" * (3 << 20)})
response = Client().post("/api/v1/webhooks/sandbox-pay", body, content_type="application/json")
print(response.status_code)
"""


def test_a_body_under_a_raised_limit_is_read_not_answered_with_a_500():
    """An operator raises the limit to 4 MiB in the environment; a 3 MiB body must then be read
    (this one is unsigned, so 401 or 422 is right), never answered with a 500."""
    env = {**os.environ, "LEDGER_MAX_BODY_BYTES": str(4 << 20)}
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    result = subprocess.run(
        [sys.executable, "-c", _RAISED_LIMIT_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    status = int(result.stdout.strip().splitlines()[-1])
    assert 400 <= status < 500 and status != 413, result.stderr[-2000:]


# --- Ids, cursors and query parameters ------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "00000000-0000-0000-0000-00000000000g"])
def test_a_non_uuid_effect_id_is_a_json_4xx(alice, bad_id):
    requests = [alice.get(f"/effects/{bad_id}")] + [
        alice.post(f"/effects/{bad_id}/{action}", {})
        for action in ("claim", "heartbeat", "outcome", "cancel", "compensate")
    ]
    for response in requests:
        assert response.status_code in (404, 422), response.content
        body = response.json()
        assert body["error"] in ("not_found", "validation_error")
        assert body["detail"]


def test_an_unknown_effect_id_is_404(alice):
    response = alice.get(f"/effects/{uuid.uuid4()}")
    assert_error(response, 404, "not_found")


def test_depends_on_naming_an_effect_that_does_not_exist_is_refused(alice):
    missing = str(uuid.uuid4())
    with nothing_written():
        response = alice.post("/effects", {**INTENT, "depends_on": [missing], "claim": True})
    assert_refused_field(response, "depends_on")
    assert missing in response.json()["fields"]["depends_on"]


def test_depends_on_naming_one_real_and_one_missing_effect_records_nothing(alice):
    real = alice.intent(step_id="upstream")
    with nothing_written():
        response = alice.post(
            "/effects",
            {**INTENT, "step_id": "downstream", "depends_on": [real["id"], str(uuid.uuid4())]},
        )
    assert_refused_field(response, "depends_on")


BAD_LIST_CURSORS = {
    "garbage": "!!not base64!!",
    "base64 of text": base64.urlsafe_b64encode(b"hello world").decode(),
    "base64 of bytes": base64.urlsafe_b64encode(b"\xff\xfe\x00").decode(),
    "an object": cursor_of({"created_at": "2024-01-01T00:00:00Z"}),
    "one part": cursor_of(["2024-01-01T00:00:00+00:00"]),
    "numbers": cursor_of([1, 2]),
    "three parts": cursor_of(["2024-01-01T00:00:00+00:00", str(uuid.uuid4()), "x"]),
    "not a date": cursor_of(["yesterday", str(uuid.uuid4())]),
    "not a uuid": cursor_of(["2024-01-01T00:00:00+00:00", "effect-7"]),
    "NUL in the id": cursor_of(["2024-01-01T00:00:00+00:00", "\u0000"]),
    "too long": "A" * 501,
}


@pytest.mark.parametrize("cursor", BAD_LIST_CURSORS.values(), ids=BAD_LIST_CURSORS.keys())
def test_a_bad_cursor_for_the_effect_list_is_refused(alice, cursor):
    alice.intent()
    response = alice.get("/effects", {"cursor": cursor})
    assert_refused_field(response, "cursor")


BAD_JOURNAL_CURSORS = {
    "garbage": "%%%",
    "base64 of text": base64.urlsafe_b64encode(b"seq=3").decode(),
    "an object": cursor_of({"seq": 3}),
    "a number, not a list": cursor_of(3),
    "a number inside": cursor_of([3]),
    "not digits": cursor_of(["three"]),
    "negative": cursor_of(["-1"]),
    "an effect-list cursor": cursor_of(["2024-01-01T00:00:00+00:00", str(uuid.uuid4())]),
    "too long": "A" * 501,
}


@pytest.mark.parametrize("cursor", BAD_JOURNAL_CURSORS.values(), ids=BAD_JOURNAL_CURSORS.keys())
def test_a_bad_cursor_for_the_journal_is_refused(alice, cursor):
    alice.intent()
    response = alice.get("/runs/run-1/journal", {"cursor": cursor})
    assert_refused_field(response, "cursor")


@pytest.mark.parametrize("digit", ["²", "①"])
def test_a_journal_cursor_holding_a_unicode_digit_is_refused(alice, digit):
    alice.intent()
    response = alice.get("/runs/run-1/journal", {"cursor": cursor_of([digit])})
    assert_refused_field(response, "cursor")


def _all_pages(client, path: str) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        response = client.get(path, {"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.content
        page = response.json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


def test_a_cursor_the_api_issued_pages_on(alice):
    """The positive control for the cursor tests above: real cursors are accepted."""
    ids = [alice.intent(step_id=f"s{i}")["id"] for i in range(5)]
    listed = _all_pages(alice, "/effects")
    assert sorted(listed) == sorted(ids)
    assert len(listed) == len(ids)
    assert _all_pages(alice, "/runs/run-1/journal") == ids


@pytest.mark.parametrize("path", ["/effects", "/runs/run-1/journal"])
@pytest.mark.parametrize("limit", [0, 501, -1, "abc", "1.5", ""])
def test_a_limit_outside_1_to_500_is_refused(alice, path, limit):
    response = alice.get(path, {"limit": limit})
    assert_refused_field(response, "limit")


@pytest.mark.parametrize("limit", [1, 500])
def test_the_limit_bounds_are_accepted(alice, limit):
    assert alice.get("/effects", {"limit": limit}).status_code == 200


@pytest.mark.parametrize("status", ["done", "PLANNED", "planned,confirmed", ""])
def test_an_unknown_status_filter_is_refused(alice, status):
    response = alice.get("/effects", {"status": status})
    assert_refused_field(response, "status")


@pytest.mark.parametrize(("name", "value"), [("run_id", "r" * 201), ("tool", "t" * 101)])
def test_an_over_long_filter_is_refused(alice, name, value):
    response = alice.get("/effects", {name: value})
    assert_refused_field(response, name)


def test_a_journal_run_id_over_200_characters_is_refused(alice):
    response = alice.get(f"/runs/{'r' * 201}/journal")
    assert_refused_field(response, "run_id")


@pytest.mark.parametrize("name", ["run_id", "tool", "owner"])
def test_a_nul_character_in_a_list_filter_is_a_4xx(alice, name):
    response = alice.get("/effects", {name: "run\u00001"})
    assert 400 <= response.status_code < 500, response.status_code
    assert response.json()["error"] == "validation_error"


def test_a_nul_character_in_the_journal_run_id_is_a_4xx(alice):
    response = alice.get("/runs/run%001/journal")
    assert 400 <= response.status_code < 500, response.status_code
    assert response.json()["error"] == "validation_error"


# --- Tokens and signatures compared in constant time -----------------------------------------


@pytest.mark.parametrize("token", ["é", "\u0080", "токен"])
def test_a_non_ascii_lease_token_on_an_outcome_is_a_4xx(alice, effect, token):
    response = alice.post(
        f"/effects/{effect['id']}/outcome", {"lease_token": token, "status": "confirmed"}
    )
    assert 400 <= response.status_code < 500, response.status_code
    assert response.json()["error"] in ("stale_lease", "validation_error")


def test_a_non_ascii_lease_token_on_a_heartbeat_is_a_stale_lease(alice, effect):
    response = alice.post(f"/effects/{effect['id']}/heartbeat", {"lease_token": "é"})
    assert_error(response, 409, "stale_lease")


def test_a_webhook_signature_with_non_ascii_characters_is_refused(client, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": "bad-input-webhook-secret-0123"}
    body = json.dumps({"idempotency_key": "el_x", "status": "confirmed"})
    response = client.post(
        "/api/v1/webhooks/sandbox-pay",
        body,
        content_type="application/json",
        headers={"X-Ledger-Signature": f"t={int(time.time())},v1=\xe9"},
    )
    assert_error(response, 401, "unauthorized")
