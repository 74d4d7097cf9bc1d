"""Generated input against everything that parses what outsiders send: the statement parsers
(CSV and JSON Lines), the webhook verifier and endpoint, and the agent API's bodies.

The property is the same everywhere: the only outcomes are a clean refusal (a StatementError,
a 4xx JSON answer naming what is wrong) or an acceptance; no exception escapes, no 500, and a
refusal writes nothing. Inputs mix well-formed values with what broke parsers before: deep
nesting, huge number literals, NULs, invalid UTF-8, byte order marks, carriage returns.
Example counts are kept small (the whole file runs in about a minute); each run draws new
examples, so over many runs the search goes on.
"""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.api import webhooks
from ledger.errors import LedgerError
from ledger.models import Effect, EffectEvent, Run, StatementImport, StatementLine, Tool
from ledger.statements.parse import COLUMNS, LineReader, Period, StatementError, rows
from tests.factories import signed_in

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SECRET = "fuzz-webhook-secret-0123456789"
PERIOD = Period(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))
VISA = "4111111111111111"

# --- What generated input is made of ---------------------------------------------------------

HOSTILE_NUMBERS = st.sampled_from(
    ["1e999999999999999999", "1e20000000", "-1E-999999", "9" * 5000, "0." + "1" * 2000,
     "1e9999999999999999999999", "1.5", "12.50", "-3", "0", "1E+2", "4111111111111111"]
)  # fmt: skip
TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]) | st.sampled_from('\x00\r\n\ufeff,"')
)
SCALARS = (
    st.none() | st.booleans() | st.integers() | TEXT | st.sampled_from([VISA, "EUR", "succeeded"])
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@st.composite
def json_text(draw: st.DrawFn, fields: dict[str, st.SearchStrategy] | None = None) -> str:
    """JSON text: an object of the given fields (some left out, some garbage), with hostile
    literals spliced in where a value goes, or arbitrary JSON, or not JSON at all."""
    shape = draw(st.sampled_from(["object", "any", "broken"]))
    if shape == "any":
        return json.dumps(draw(JSON_VALUES))
    if shape == "broken":
        return draw(TEXT | st.integers(1, 200_000).map(lambda n: "[" * n))
    fields = fields or {}
    parts = []
    for name, values in fields.items():
        if draw(st.integers(0, 5)) == 0:
            continue  # a field left out
        choice = draw(st.integers(0, 3))
        if choice == 0:
            raw = draw(HOSTILE_NUMBERS | st.integers(30, 100_000).map(_nested))
        elif choice == 1:
            raw = json.dumps(draw(JSON_VALUES))
        else:
            raw = json.dumps(draw(values))
        parts.append(f"{json.dumps(name)}: {raw}")
    if draw(st.booleans()):
        parts.append(f"{json.dumps(draw(TEXT))}: {json.dumps(draw(JSON_VALUES))}")
    return "{" + ", ".join(parts) + "}"


def mangle(text: str, extra: bytes) -> bytes:
    """The text as bytes, sometimes with a BOM, invalid UTF-8 or CRs."""
    return extra[:3] + text.encode("utf-8", "surrogatepass") + extra[3:]


BYTE_NOISE = st.sampled_from([b"", b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\r\n\r", b"\x00\x00\x80"])

# --- Statement parsers -----------------------------------------------------------------------

TIMES = st.sampled_from(["2026-01-01T10:00:00+00:00", "2026-01-03T00:00:00Z", "yesterday", ""])
LINE_FIELDS = {
    "provider_ref": st.sampled_from(["ch_1", VISA, f"ref {VISA}", ""]) | TEXT,
    "reference": st.sampled_from(["el_abc", ""]) | TEXT,
    "amount": st.sampled_from(["12.50", "1250", "-1.00", "1e3"]) | TEXT,
    "currency": st.sampled_from(["EUR", "JPY", "XXX", "eur"]) | TEXT,
    "status": st.sampled_from(["succeeded", "failed", "paid", "PENDING"]) | TEXT,
    "occurred_at": TIMES | TEXT,
    "type": st.sampled_from(["charge", "refund", "fee", ""]) | TEXT,
}


def line_reader(unit: str) -> LineReader:
    tool = Tool(name="fuzz_pay", amount_unit=unit, statement_status={"paid": "succeeded"})
    return LineReader(tool, PERIOD)


def parse_all(content: bytes, fmt: str, unit: str) -> int:
    """How many rows the file gives; StatementError is the only refusal allowed."""
    try:
        return sum(1 for _ in rows(io.BytesIO(content), fmt, line_reader(unit)))
    except StatementError as exc:
        assert len(str(exc)) < 1000, str(exc)[:200]
        assert VISA not in str(exc)
        return -1


@FUZZ
@given(
    lines=st.lists(json_text(LINE_FIELDS), max_size=4),
    noise=BYTE_NOISE,
    unit=st.sampled_from(["major", "minor"]),
)
def test_the_json_lines_parser_only_says_no(lines, noise, unit):
    parse_all(mangle("\n".join(lines), noise), "jsonl", unit)


@st.composite
def csv_text(draw: st.DrawFn) -> str:
    header = draw(st.permutations([*COLUMNS, "type"]).map(list) | st.lists(TEXT, max_size=8))
    body = []
    for _ in range(draw(st.integers(0, 4))):
        cells = [draw(LINE_FIELDS.get(name, TEXT) | HOSTILE_NUMBERS) for name in header]
        if draw(st.integers(0, 4)) == 0:
            cells.append(draw(TEXT))  # a cell too many
        body.append(",".join(json.dumps(c) if draw(st.booleans()) else c for c in cells))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return newline.join([",".join(header), *body])


@FUZZ
@given(text=csv_text(), noise=BYTE_NOISE, unit=st.sampled_from(["major", "minor"]))
def test_the_csv_parser_only_says_no(text, noise, unit):
    parse_all(mangle(text, noise), "csv", unit)


def _statement_rows() -> tuple[int, int, int, int]:
    return (
        StatementImport.objects.count(),
        StatementLine.objects.count(),
        Effect.objects.count(),
        EffectEvent.objects.count(),
    )


@settings(FUZZ, max_examples=60)
@given(
    text=json_text(LINE_FIELDS) | csv_text(),
    fmt=st.sampled_from(["s.jsonl", "s.csv"]),
    noise=BYTE_NOISE,
)
def test_an_uploaded_statement_is_imported_or_refused_with_nothing_written(
    olga, stmt_tool, text, fmt, noise
):
    before = _statement_rows()
    response = signed_in(olga).post(
        "/statements/upload",
        {
            "tool": "charge_card",
            "period_start": "2026-01-01T00:00",
            "period_end": "2026-01-02T00:00",
            "file": SimpleUploadedFile(fmt, mangle(text, noise)),
        },
    )
    assert response.status_code in (302, 422), response.status_code
    if response.status_code == 422:
        assert len(response.content) < 64 * 1024
        assert _statement_rows() == before


# --- The webhook verifier and endpoint -------------------------------------------------------

HEADERS = st.one_of(
    TEXT,
    st.builds(
        lambda t, v: f"t={t},v1={v}",
        st.integers(-(10**20), 10**20).map(str) | TEXT,
        st.text("0123456789abcdef", max_size=70) | TEXT,
    ),
)


@FUZZ
@given(
    provider=st.sampled_from(["sandbox-pay", "nobody"]) | TEXT,
    header=HEADERS,
    body=st.binary(max_size=200),
)
def test_the_webhook_verifier_only_refuses(provider, header, body):
    with override_settings(LEDGER_WEBHOOK_SECRETS={"sandbox-pay": SECRET}):
        try:
            webhooks.verify(provider, header, body)
        except (webhooks.BadSignature, LedgerError) as exc:
            assert exc.status in (401, 404)
        else:
            pytest.fail("a generated signature was accepted")


WEBHOOK_FIELDS = {
    "idempotency_key": st.sampled_from(["el_nosuchkey"]) | TEXT,
    "status": st.sampled_from(["confirmed", "failed"]) | TEXT,
    "provider_ref": st.sampled_from([VISA, f"{VISA} " * 30]) | TEXT,
    "response": JSON_VALUES,
}


def _ledger_rows() -> tuple[int, int, int]:
    return Effect.objects.count(), EffectEvent.objects.count(), Run.objects.count()


@settings(FUZZ, max_examples=200)
@given(body=json_text(WEBHOOK_FIELDS), noise=BYTE_NOISE, signed=st.booleans(), header=HEADERS)
def test_the_webhook_endpoint_answers_4xx_json_and_writes_nothing(
    alice, body, noise, signed, header
):
    raw = mangle(body, noise)
    if signed:
        header = webhooks.sign(SECRET, int(time.time()), raw)
    before = _ledger_rows()
    with override_settings(LEDGER_WEBHOOK_SECRETS={"sandbox-pay": SECRET}):
        response = Client().post(
            "/api/v1/webhooks/sandbox-pay",
            raw,
            content_type="application/json",
            headers={"X-Ledger-Signature": header},
        )
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert response.json()["error"]
    assert len(response.content) < 4096
    assert _ledger_rows() == before


# --- The agent API's bodies ------------------------------------------------------------------

INTENT_FIELDS = {
    "run_id": st.sampled_from(["run-f"]) | TEXT,
    "step_id": st.sampled_from(["step-f"]) | TEXT,
    "tool": st.sampled_from(["charge_card", "get_balance"]) | TEXT,
    "target": st.sampled_from(["acct_42", VISA]) | TEXT,
    "request": st.dictionaries(TEXT, JSON_VALUES, max_size=4),
    "lease_seconds": st.integers() | HOSTILE_NUMBERS,
    "depends_on": st.lists(st.uuids().map(str) | TEXT, max_size=2),
}
OTHER_FIELDS = {
    "lease_token": st.sampled_from(["tok"]) | TEXT,
    "status": st.sampled_from(["confirmed", "failed", "unknown"]) | TEXT,
    "provider_ref": st.sampled_from([VISA]) | TEXT,
    "response": JSON_VALUES,
    "error": JSON_VALUES,
    "owner": TEXT,
    "lease_seconds": st.integers() | HOSTILE_NUMBERS,
    "reason": TEXT,
    "request": st.dictionaries(TEXT, JSON_VALUES, max_size=4),
    "run_id": TEXT,
    "limit": st.integers(),
}
PATHS = ["outcome", "compensate", "claim", "cancel", "heartbeat"]


def _assert_clean_answer(response, before) -> None:
    assert response.status_code < 500, (response.status_code, response.content[:300])
    assert len(response.content) < 16 * 1024
    if response.status_code >= 400:
        body = response.json()
        assert body["error"], body
        if body["error"] == "validation_error":
            assert body["fields"] and all(len(name) <= 200 for name in body["fields"]), body
        assert _ledger_rows() == before


@settings(FUZZ, max_examples=200)
@given(body=json_text(INTENT_FIELDS), noise=BYTE_NOISE)
def test_posting_an_intent_is_a_clean_answer_whatever_the_body(alice, body, noise):
    before = _ledger_rows()
    _assert_clean_answer(alice.post("/effects", raw=mangle(body, noise)), before)


@pytest.fixture
def claimed(alice) -> dict:
    effect = alice.intent(claim=True, claim_id="c1")
    Effect.objects.filter(pk=effect["id"]).update(
        lease_expires_at=datetime.now(UTC) + timedelta(hours=1)
    )
    return effect


@settings(FUZZ, max_examples=250)
@given(body=json_text(OTHER_FIELDS), noise=BYTE_NOISE, path=st.sampled_from([*PATHS, None]))
def test_every_other_body_is_a_clean_answer_whatever_it_holds(alice, claimed, body, noise, path):
    before = _ledger_rows()
    where = f"/effects/{claimed['id']}/{path}" if path else "/recovery"
    _assert_clean_answer(alice.post(where, raw=mangle(body, noise)), before)
