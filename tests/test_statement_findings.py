"""The review's statement findings, each pinned black-box over HTTP, as an operator meets them.

M3: a JSON Lines upload of 100,000 `[`, an amount of 1e999999999999999999 and a 147-byte file
holding 1e20000000 each answered a 500 (or a 20 MB page): now a small 4xx naming the line.
M4: a card number in a statement line's provider_ref was stored raw in the line, the effect,
its events, the pages and events.csv: now tokenized, with the same token the outcome path
gives the effect's ref, so that the line still matches the effect.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client

from ledger.models import Effect, EffectEvent, ReviewItem, StatementImport, StatementLine
from tests.factories import signed_in
from tests.test_no_card_numbers_stored import stored_card_numbers

VISA = "4111111111111111"
# A refusal page is the statements page and one sentence; the 20 MB answer was the finding.
SMALL_PAGE = 64 * 1024
SOME_TIME = "2026-01-01T00:00:00+00:00"


def yesterday() -> tuple[datetime, datetime]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now = cursor.fetchone()[0]
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start - timedelta(days=1), start


def upload(client: Client, content: bytes, name: str):
    start, end = yesterday()
    return client.post(
        "/statements/upload",
        {
            "tool": "charge_card",
            "period_start": start.strftime("%Y-%m-%dT%H:%M"),
            "period_end": end.strftime("%Y-%m-%dT%H:%M"),
            "file": SimpleUploadedFile(name, content, content_type="application/octet-stream"),
        },
    )


def jsonl_line(
    amount: str, *, provider_ref: str = "ch_1", reference: str = "el_x", at: str = ""
) -> str:
    """One statement line with `amount` written into the JSON as is (a number literal)."""
    at = at or (yesterday()[0] + timedelta(hours=2)).isoformat()
    compact = {"separators": (",", ":")}
    head = json.dumps({"provider_ref": provider_ref, "reference": reference}, **compact)[:-1]
    rest = json.dumps({"currency": "EUR", "status": "succeeded", "occurred_at": at}, **compact)
    return f'{head},"amount":{amount},{rest[1:]}\n'


def refusal(response) -> str:
    assert response.status_code == 422, response.status_code
    assert len(response.content) < SMALL_PAGE, len(response.content)
    html = response.content.decode()
    return html.split('id="statement-problem"')[1].split("</div>")[0]


def test_a_hundred_thousand_open_brackets_are_a_small_4xx_naming_the_line(olga, stmt_tool):
    response = upload(signed_in(olga), b"[" * 100_000 + b"\n", "deep.jsonl")
    problem = refusal(response)
    assert "line 1" in problem and "nested deeper than 64" in problem
    assert not StatementImport.objects.exists()


def test_an_amount_beyond_decimals_own_exponent_is_a_small_4xx_naming_the_field(olga, stmt_tool):
    content = jsonl_line("1e999999999999999999").encode()
    problem = refusal(upload(signed_in(olga), content, "huge.jsonl"))
    assert "line 1" in problem and "amount" in problem and "out of range" in problem
    assert not StatementImport.objects.exists()


def test_a_147_byte_file_holding_1e20000000_is_a_small_4xx_naming_the_line(olga, stmt_tool):
    line = jsonl_line("1e20000000")
    # Padded to the finding's 147 bytes through the provider ref.
    line = jsonl_line("1e20000000", provider_ref="ch_1" + "x" * (147 - len(line.encode())))
    content = line.encode()
    assert len(content) == 147
    problem = refusal(upload(signed_in(olga), content, "small.jsonl"))
    assert "line 1" in problem and "amount" in problem
    assert "0000000000" not in problem
    assert not StatementImport.objects.exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("int.jsonl", jsonl_line("9" * 1_000_000, at=SOME_TIME).encode()),
        ("float.jsonl", jsonl_line("1." + "0" * 1_000_000, at=SOME_TIME).encode()),
        ("csv.csv", b"provider_ref,reference,amount,currency,status,occurred_at\n"
         + b"ch_1,el_x," + b"9" * 100_000 + b",EUR,succeeded,2026-01-01T00:00:00+00:00\n"),
        ("header.csv", b",".join([b"column"] * 20_000) + b"\n"),
        ("status.csv", b"provider_ref,reference,amount,currency,status,occurred_at\n"
         + b"ch_1,el_x,1.00,EUR," + b"s" * 100_000 + b",2026-01-01T00:00:00+00:00\n"),
    ],
)  # fmt: skip
def test_no_refused_value_is_echoed_at_length(olga, stmt_tool, name, content):
    problem = refusal(upload(signed_in(olga), content, name))
    assert "line " in problem and len(problem) < 1000, problem


def _card_everywhere_checks(client: Client, effect_id: str) -> None:
    """No raw card in any table, on the statements and effect pages, or in events.csv."""
    assert stored_card_numbers() == {}
    for path in ("/statements/", f"/effects/{effect_id}/", "/incidents/"):
        page = client.get(path)
        assert page.status_code == 200 and VISA not in page.content.decode(), path
    export = client.get("/audit/exports/events.csv")
    assert export.status_code == 200
    body = b"".join(export.streaming_content) if export.streaming else export.content
    assert VISA.encode() not in body and b"[card:" in body


def test_a_card_number_in_a_statements_provider_ref_is_stored_nowhere(olga, stmt_tool, make_effect):
    """The statement settles an effect left unknown: the line's ref becomes the effect's ref
    and goes into its events, tokenized throughout."""
    effect = make_effect("unknown", attempt=1, request={"amount": "10.00", "currency": "EUR"})
    client = signed_in(olga)
    content = jsonl_line('"10.00"', provider_ref=VISA, reference=effect.idempotency_key)
    response = upload(client, content.encode(), "cards.jsonl")
    assert response.status_code == 302, response.content[:2000]
    stored = Effect.objects.get(pk=effect.pk)
    assert stored.status == "confirmed" and stored.provider_ref.startswith("[card:")
    assert StatementLine.objects.get().provider_ref == stored.provider_ref
    events = EffectEvent.objects.filter(effect_id=effect.pk, data__provider_ref=stored.provider_ref)
    assert events.exists()
    _card_everywhere_checks(client, str(effect.pk))


def test_a_statement_line_still_matches_an_effect_whose_card_ref_was_tokenized_alike(
    alice, olga, stmt_tool
):
    """The agent reported the card as the provider ref; the statement lists the same card: the
    line agrees with the effect (no duplicate), because both sides have the same token."""
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref=VISA)
    client = signed_in(olga)
    content = jsonl_line('"10.00"', provider_ref=VISA, reference=effect["idempotency_key"])
    response = upload(client, content.encode(), "cards.jsonl")
    assert response.status_code == 302, response.content[:2000]
    line = StatementLine.objects.get()
    assert line.effect_id == Effect.objects.get(pk=effect["id"]).pk
    assert line.outcome == "agrees", line.outcome
    assert not ReviewItem.objects.filter(effect_id=effect["id"]).exists()
    _card_everywhere_checks(client, effect["id"])


def test_a_card_number_in_the_file_name_and_reference_is_stored_nowhere(olga, stmt_tool):
    at = (yesterday()[0] + timedelta(hours=2)).isoformat()
    content = (
        "provider_ref,reference,amount,currency,status,occurred_at\n"
        f"ch_1,ref {VISA},1.00,EUR,succeeded,{at}\n"
    ).encode()
    response = upload(signed_in(olga), content, f"card {VISA}.csv")
    assert response.status_code == 302, response.content[:2000]
    assert StatementImport.objects.get().filename.startswith("card [card:")
    assert StatementLine.objects.get().reference.startswith("ref [card:")
    assert stored_card_numbers() == {}
