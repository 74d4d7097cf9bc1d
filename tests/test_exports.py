"""Auditor exports: effects, events and decisions as CSV and JSON Lines, filtered, streamed,
and recorded."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.models import AuditExport, Effect, EffectEvent, EventSeal, Reason
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import Ask, decide
from tests.factories import signed_in

DATASETS = ("effects", "events", "decisions")
FORMATS = ("csv", "jsonl")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def download(client: Client, dataset: str, fmt: str, **params: str):
    response = client.get(f"/audit/exports/{dataset}.{fmt}", params)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def parse(body: bytes, fmt: str) -> list[dict[str, Any]]:
    text = body.decode()
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(text, newline="")))
    assert text == "" or text.endswith("\n")
    return [json.loads(line, parse_float=Decimal) for line in text.splitlines()]


def exported(client: Client, dataset: str, fmt: str, **params: str) -> list[dict[str, Any]]:
    response, body = download(client, dataset, fmt, **params)
    assert response.status_code == 200, body[:500]
    return parse(body, fmt)


def event(effect: Effect, at: datetime | None = None, **fields: Any) -> EffectEvent:
    values: dict[str, Any] = {
        "effect": effect,
        "kind": "transition",
        "actor": "agent:alice",
        "from_status": "planned",
        "to_status": "dispatching",
        "data": {},
        "digest": "0" * 64,
    }
    if at is not None:
        values["created_at"] = at
    values.update(fields)
    return EffectEvent.objects.create(**values)


def decision_on(make_effect, target: Effect, at: datetime | None = None, **provenance: Any):
    values: dict[str, Any] = {"kind": "decision", "parent": target, "tool": "operator_decision"}
    if at is not None:
        values["created_at"] = at
    return make_effect(
        "confirmed",
        provenance={
            "actor": "operator:olga",
            "reason": "checked the provider",
            "before": {"status": "unknown"},
            "after": {"status": "confirmed"},
            **provenance,
        },
        **values,
    )


@pytest.fixture
def ledger(make_effect, make_agent) -> dict[str, Any]:
    """Effects that differ in time, run, tool, agent and status; events on them; decisions."""
    carol = make_agent("carol").agent
    rows = {
        "old": make_effect("confirmed", created_at=T0, run_id="r1"),
        "mid": make_effect("unknown", created_at=T0 + timedelta(days=1), tool="send_email"),
        "new": make_effect("failed", created_at=T0 + timedelta(days=2), run_id="r2"),
        "carol": make_effect("planned", created_at=T0 + timedelta(days=3), agent=carol),
    }
    events = [
        event(effect, T0 + timedelta(days=d, hours=h))
        for d, effect in enumerate(rows.values())
        for h in (1, 2)
    ]
    decisions = [
        decision_on(make_effect, effect, T0 + timedelta(days=d, hours=5))
        for d, effect in enumerate(rows.values())
    ]
    return {"effects": rows, "events": events, "decisions": decisions}


def expected_ids(dataset: str, **lookups: Any) -> list[str]:
    """The ids the database holds for a filter, in export order, by the ORM."""
    if dataset == "events":
        rows = EffectEvent.objects.filter(**lookups)
    elif dataset == "decisions":
        rows = Effect.objects.filter(kind="decision", **lookups)
    else:
        rows = Effect.objects.filter(**lookups)
    return [str(pk) for pk in rows.order_by("created_at", "id").values_list("id", flat=True)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dataset", DATASETS)
def test_each_export_parses_and_holds_every_row_in_order(audrey, ledger, dataset, fmt):
    rows = exported(signed_in(audrey), dataset, fmt)

    assert [str(row["id"]) for row in rows] == expected_ids(dataset)
    assert len(rows) == {"effects": 8, "events": 8, "decisions": 4}[dataset]


@pytest.mark.parametrize("fmt", FORMATS)
def test_csv_and_jsonl_have_the_documented_columns(audrey, ledger, fmt):
    client = signed_in(audrey)
    assert list(exported(client, "effects", fmt)[0]) == [
        "id", "agent", "run_id", "step_id", "seq", "kind", "tool", "target", "status",
        "attempt", "max_attempts", "idempotency_key", "request_hash", "provider_ref",
        "parent_id", "created_at", "updated_at", "resolved_at", "request", "response", "error",
        "provenance",
    ]  # fmt: skip
    assert list(exported(client, "events", fmt)[0]) == [
        "id", "effect_id", "kind", "actor", "from_status", "to_status", "reason", "data",
        "digest", "created_at", "seal_seq", "seal_hash",
    ]  # fmt: skip
    assert list(exported(client, "decisions", fmt)[0])[:7] == [
        "id", "parent_id", "actor", "reason", "before", "after", "created_at",
    ]  # fmt: skip


FILTERS = [
    # (query string, the same filter as ORM lookups on effects / on events / on decisions)
    (
        {"since": "2026-03-02T12:00:00"},
        {"created_at__gte": T0 + timedelta(days=1)},
        {"created_at__gte": T0 + timedelta(days=1)},
        {"created_at__gte": T0 + timedelta(days=1)},
    ),
    (
        {"until": "2026-03-02T13:00"},
        {"created_at__lt": T0 + timedelta(days=1, hours=1)},
        {"created_at__lt": T0 + timedelta(days=1, hours=1)},
        {"created_at__lt": T0 + timedelta(days=1, hours=1)},
    ),
    ({"run_id": "r2"}, {"run_id": "r2"}, {"effect__run_id": "r2"}, {"parent__run_id": "r2"}),
    (
        {"tool": "send_email"},
        {"tool": "send_email"},
        {"effect__tool": "send_email"},
        {"parent__tool": "send_email"},
    ),
    (
        {"agent": "carol"},
        {"agent__name": "carol"},
        {"effect__agent__name": "carol"},
        {"parent__agent__name": "carol"},
    ),
    (
        {"status": "unknown"},
        {"status": "unknown"},
        {"effect__status": "unknown"},
        {"parent__status": "unknown"},
    ),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("params", "on_effects", "on_events", "on_decisions"), FILTERS)
def test_each_filter_narrows_every_dataset(
    audrey, ledger, fmt, params, on_effects, on_events, on_decisions
):
    client = signed_in(audrey)
    lookups = {"effects": on_effects, "events": on_events, "decisions": on_decisions}
    for dataset in DATASETS:
        rows = exported(client, dataset, fmt, **params)
        expected = expected_ids(dataset, **lookups[dataset])
        assert [str(row["id"]) for row in rows] == expected, (dataset, params)
        # The filter narrows, but not to nothing: every case is a real test of the filter.
        assert 0 < len(expected) < len(expected_ids(dataset))


def test_the_date_range_is_from_inclusive_until_exclusive_and_filters_combine(audrey, ledger):
    client = signed_in(audrey)
    # Events at T0+1h, T0+2h (effect `old`), T0+1d+1h, T0+1d+2h (effect `mid`, unknown), …
    window = {"since": "2026-03-01T13:00:00Z", "until": "2026-03-02T14:00:00Z"}
    e0, e1, e2 = ledger["events"][:3]

    rows = exported(client, "events", "jsonl", **window)
    narrowed = exported(client, "events", "jsonl", **window, status="unknown")

    assert [row["id"] for row in rows] == [e0.id, e1.id, e2.id]
    assert [row["id"] for row in narrowed] == [e2.id]


def test_an_export_is_recorded_with_who_which_filter_and_how_many_rows(audrey, ledger):
    rows = exported(signed_in(audrey), "events", "csv", run_id="r1", tool="")

    [record] = AuditExport.objects.all()
    assert (record.user, record.username, record.dataset, record.format) == (
        audrey,
        "audrey",
        "events",
        "csv",
    )
    assert record.filters == {"run_id": "r1"}
    assert record.rows == 2 == len(rows)
    assert record.finished_at is not None and record.finished_at >= record.started_at


def test_the_download_is_an_attachment_named_for_dataset_date_and_format(audrey, ledger):
    client = signed_in(audrey)
    csv_response, _ = download(client, "effects", "csv")
    jsonl_response, _ = download(client, "decisions", "jsonl")

    assert csv_response["Content-Type"] == "text/csv; charset=utf-8"
    assert jsonl_response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    first, second = AuditExport.objects.order_by("id")
    today = first.started_at.date().isoformat()
    assert csv_response["Content-Disposition"] == (
        f'attachment; filename="ledger-effects-{today}-{first.pk}.csv"'
    )
    assert jsonl_response["Content-Disposition"] == (
        f'attachment; filename="ledger-decisions-{today}-{second.pk}.jsonl"'
    )
    assert "no-store" in csv_response["Cache-Control"]


@pytest.mark.django_db(transaction=True)
def test_a_download_the_client_abandons_stays_unfinished(audrey, make_effect):
    # Enough rows for several chunks, so the client leaves while PostgreSQL is still sending.
    effect = make_effect("confirmed")
    EffectEvent.objects.bulk_create(
        EffectEvent(effect=effect, kind="transition", actor="a", data={"n": "x" * 200}, digest="0")
        for _ in range(3000)
    )
    client = signed_in(audrey)
    response = client.get("/audit/exports/events.jsonl")
    first_chunk = next(iter(response.streaming_content))
    response.close()

    assert first_chunk.count(b"\n") < 3000
    [record] = AuditExport.objects.all()
    assert (record.finished_at, record.rows) == (None, None)
    # The connection is usable again: the next export runs to its end.
    rows = exported(client, "events", "csv")
    assert len(rows) == 3000
    assert AuditExport.objects.filter(finished_at__isnull=False, rows=3000).count() == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "yesterday-ish"}, "Enter a valid date/time."),
        ({"until": "2026-02-30"}, "Enter a valid date/time."),
        ({"status": "lost"}, "Select a valid choice."),
        ({"since": "2026-03-02", "until": "2026-03-01"}, "must be earlier than"),
    ],
)
def test_a_bad_filter_is_a_400_page_with_the_error_and_exports_nothing(
    audrey, ledger, params, message
):
    response, body = download(signed_in(audrey), "events", "csv", **params)

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert message in body.decode()
    assert not AuditExport.objects.exists()


@pytest.mark.parametrize("path", ["/audit/exports/", "/audit/exports/events.csv"])
def test_anonymous_users_are_sent_to_sign_in(db, path):
    response = Client().get(path)

    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")
    assert not AuditExport.objects.exists()


@pytest.mark.parametrize("path", ["/audit/exports/", "/audit/exports/events.csv"])
def test_a_user_without_a_role_is_refused(nemo, path):
    response = signed_in(nemo).get(path)

    assert response.status_code == 403
    assert not AuditExport.objects.exists()


def test_operators_may_export_too(olga, ledger):
    assert len(exported(signed_in(olga), "effects", "jsonl")) == 8


@pytest.mark.parametrize("path", ["/audit/exports/payments.csv", "/audit/exports/events.xlsx"])
def test_an_unknown_dataset_or_format_is_404(audrey, path):
    assert signed_in(audrey).get(path).status_code == 404
    assert not AuditExport.objects.exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_decimals_unicode_commas_quotes_and_newlines_survive_the_round_trip(
    audrey, make_effect, fmt
):
    request = {
        "amount": Decimal("10.10"),
        "big": Decimal("12345678901234567890.000000001"),
        "note": 'a, "quoted"\nsecond line; ünïcödé ✓ 🙂 back\\slash \x01\x02\x7f',
    }
    effect = make_effect(
        "confirmed",
        request=request,
        target='acct, "x"\nline two',
        provider_ref="ch_ü",
        response={"fee": Decimal("0.30")},
    )
    event(effect, data={"amount": Decimal("1E+2"), "tab": "a\tb"}, reason="line\nbreak, ok")

    [row] = exported(signed_in(audrey), "effects", fmt)
    [ev] = exported(signed_in(audrey), "events", fmt)

    def json_of(value: Any) -> Any:
        return json.loads(value, parse_float=Decimal) if fmt == "csv" else value

    assert json_of(row["request"]) == request
    assert str(json_of(row["request"])["amount"]) == "10.10"
    assert json_of(row["response"]) == {"fee": Decimal("0.30")}
    assert row["target"] == 'acct, "x"\nline two'
    assert row["provider_ref"] == "ch_ü"
    assert json_of(ev["data"]) == {"amount": Decimal("100"), "tab": "a\tb"}
    assert ev["reason"] == "line\nbreak, ok"


def test_formula_looking_csv_cells_get_an_apostrophe_and_jsonl_stays_exact(audrey, make_effect):
    effect = make_effect(
        "confirmed",
        run_id='=HYPERLINK("http://evil")',
        step_id="+1",
        target="-2+3",
        provider_ref="@SUM(A1)",
        tool="'quoted",
        request={"note": "=1+1"},
    )
    event(effect, actor="\tagent", reason="\r=cmd")
    client = signed_in(audrey)

    [row] = exported(client, "effects", "csv")
    [ev] = exported(client, "events", "csv")
    assert (row["run_id"], row["step_id"], row["target"], row["provider_ref"], row["tool"]) == (
        '\'=HYPERLINK("http://evil")',
        "'+1",
        "'-2+3",
        "'@SUM(A1)",
        "''quoted",
    )
    assert (ev["actor"], ev["reason"]) == ("'\tagent", "'\r=cmd")
    # Ids, keys and JSON are untouched: exact, and never read as a formula.
    assert row["id"] == str(effect.id)
    assert row["idempotency_key"] == effect.idempotency_key
    assert json.loads(row["request"]) == {"note": "=1+1"}

    [exact] = exported(client, "effects", "jsonl")
    assert (exact["run_id"], exact["target"], exact["tool"]) == (
        '=HYPERLINK("http://evil")',
        "-2+3",
        "'quoted",
    )


def test_decisions_carry_who_decided_why_and_the_state_before_and_after(audrey, olga, make_effect):
    target = make_effect("unknown", attempt=1)
    open_review(target.id, Reason.INCONCLUSIVE)
    decided = decide(
        target.id,
        Ask(action="confirm", reason="seen at the provider", expected_version=target.version,
            provider_ref="ch_7", evidence="dashboard"),
        user=olga,
    )  # fmt: skip

    [csv_row] = exported(signed_in(audrey), "decisions", "csv")
    [json_row] = exported(signed_in(audrey), "decisions", "jsonl")

    for row, loads in ((csv_row, json.loads), (json_row, lambda value: value)):
        assert row["id"] == str(decided.decision.id)
        assert row["parent_id"] == str(target.id)
        assert (row["actor"], row["reason"]) == ("operator:olga", "seen at the provider")
        assert loads(row["before"])["status"] == "unknown"
        assert loads(row["after"])["status"] == "confirmed"
        assert row["kind"] == "decision"


def test_events_carry_their_seal_once_sealed(audrey, make_effect):
    effect = make_effect("confirmed")
    sealed, unsealed = event(effect), event(effect)
    EventSeal.objects.create(seq=1, event=sealed, prev_hash="0" * 64, hash="ab" * 32)

    for fmt in FORMATS:
        first, second = exported(signed_in(audrey), "events", fmt)
        assert (str(first["id"]), str(first["seal_seq"]), first["seal_hash"]) == (
            str(sealed.id),
            "1",
            "ab" * 32,
        )
        assert str(second["id"]) == str(unsealed.id)
        assert second["seal_seq"] in ("", None) and second["seal_hash"] in ("", None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_queries_do_not_grow_with_the_row_count(audrey, make_effect, fmt):
    client = signed_in(audrey)
    effect = make_effect("confirmed")

    def queries_for(total: int) -> int:
        EffectEvent.objects.bulk_create(
            EffectEvent(effect=effect, kind="transition", actor="a", digest="0")
            for _ in range(total - EffectEvent.objects.count())
        )
        with CaptureQueriesContext(connection) as captured:
            rows = exported(client, "events", fmt)
        assert len(rows) == total
        return len(captured)

    assert queries_for(10) == queries_for(200)


def test_the_page_has_a_labelled_filter_download_buttons_and_the_last_20_exports(audrey, ledger):
    client = signed_in(audrey)
    for n in range(22):
        AuditExport.objects.create(
            username=f"person-{n}", dataset="events", format="csv", filters={"run_id": f"r{n}"}
        )

    response = client.get("/audit/exports/", {"run_id": "r1"})
    page = response.content.decode()

    assert response.status_code == 200
    for name in ("since", "until", "run_id", "tool", "agent", "status"):
        assert f'<label for="id_{name}">' in page
        assert f'name="{name}"' in page
    assert 'value="r1"' in page  # the filter is kept in the form
    for dataset in DATASETS:
        for fmt in FORMATS:
            assert f'formaction="/audit/exports/{dataset}.{fmt}"' in page
    assert 'method="get"' in page
    assert "person-21" in page and "person-2<" in page
    assert "person-1<" not in page and "person-0<" not in page
    assert page.index("person-21") < page.index("person-20")


def test_the_page_with_a_bad_filter_is_a_400_with_the_error(audrey):
    response = signed_in(audrey).get("/audit/exports/", {"since": "soon"})

    assert response.status_code == 400
    page = response.content.decode()
    assert "Enter a valid date/time." in page
    assert 'aria-invalid="true" aria-describedby="id_since_helptext id_since_error"' in page
    assert 'value="soon"' in page  # what was typed is shown back
