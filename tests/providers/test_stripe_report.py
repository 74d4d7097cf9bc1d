"""Stripe's itemized balance change report: imported as Stripe writes it for a tool that reads
statements in it, refused whole at its first malformed line, and fetched through the official
SDK from the Reporting API's sandbox (a real process: report run, polling, file download)."""

from __future__ import annotations

import csv
import io
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from devstack.sandbox.stripe_reporting import DEFAULT_COLUMNS, Movement, line
from ledger.models import Effect, StatementImport, StatementLine, Tool
from ledger.statements import StatementError, import_statement
from ledger.statements.formats import named, register
from reconcilers.providers.outcomes import StatementFetchError
from reconcilers.providers.stripe import reporting
from reconcilers.providers.stripe.report import NAME, PAYMENT_KEY, REFUND_KEY, REPORT
from tests.providers import stripe_examples
from tests.test_statements_support import day, db_now, dispatched, load_tools, run_import

COLUMNS = list(reporting.COLUMNS)
KEY_ENV = "EL_TEST_STRIPE_REPORT_KEY"


@pytest.fixture
def setup(db, tmp_path, make_effect):
    """stmt_pay and stmt_refund reading statements in Stripe's report; a past day."""
    load_tools(tmp_path)
    register(REPORT)  # what the Stripe adapter's `report` makes known at startup
    for name in ("stmt_pay", "stmt_refund"):
        Tool.objects.filter(name=name).update(statements=True, statement_format=NAME)
    period = day(db_now(), 2)
    return SimpleNamespace(period=period, claim=period[0] + timedelta(hours=10))


def report(movements: list[Movement], columns: list[str] = COLUMNS) -> bytes:
    """A report in Stripe's shape, as the Reporting API's sandbox writes one."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for movement in movements:
        writer.writerow(line(movement, columns))
    return out.getvalue().encode()


def moved(at: datetime, category: str, amount: int, **values: Any) -> Movement:
    n = values.pop("n", 1)
    return Movement(
        id=f"txn_{category}_{n}", created=int(at.timestamp()), currency="eur", amount=amount,
        reporting_category=category, source=values.pop("source", f"ch_{n}"), **values,
    )  # fmt: skip


def fresh(effect: Effect) -> Effect:
    return Effect.objects.get(pk=effect.pk)


def test_the_format_is_known_by_its_name_once_registered(setup):
    assert named(NAME) is REPORT and REPORT.amount_unit == "major"


def test_a_report_in_stripes_shape_settles_charges_and_refunds(setup, make_effect):
    claim = setup.claim
    window = [(claim, claim + timedelta(minutes=1))]
    charge = dispatched(make_effect, window)
    parent = make_effect("confirmed", tool="stmt_pay", provider_ref="pi_parent", attempt=1,
                         request={"amount": "12.50", "currency": "EUR"})  # fmt: skip
    refund = dispatched(make_effect, window, tool="stmt_refund", kind="compensation",
                        parent=parent)  # fmt: skip
    at = claim + timedelta(seconds=20)
    content = report([
        moved(at, "charge", 1250, fee=66, payment_intent="pi_1", charge="ch_1",
              payment_metadata={"ledger_key": charge.idempotency_key}),
        moved(at, "refund", -1250, n=2, source="re_2", payment_intent="pi_parent",
              charge="ch_parent", payment_metadata={"ledger_key": parent.idempotency_key},
              refund_metadata={"ledger_key": refund.idempotency_key}),
        moved(at, "payout", -90000, n=3, source="po_3"),  # no agent's effect: skipped
        moved(at, "fee", -30, n=4, source="bfee_4", description="Billing usage fee"),
    ])  # fmt: skip

    made = run_import(setup.period, [], content=content, filename="stripe-report.csv")

    charge, refund = fresh(charge), fresh(refund)
    assert (charge.status, charge.provider_ref) == ("confirmed", "pi_1")
    assert (refund.status, refund.provider_ref) == ("confirmed", "re_2")
    assert fresh(parent).status == "compensated"
    lines = {
        (x.line_no, x.type, x.provider_ref, x.status, x.amount_minor, x.currency, x.occurred_at)
        for x in StatementLine.objects.filter(statement=made)
    }
    assert lines == {
        (2, "charge", "pi_1", "succeeded", 1250, "EUR", at.replace(microsecond=0)),
        (3, "refund", "re_2", "succeeded", 1250, "EUR", at.replace(microsecond=0)),
        (5, "fee", "bfee_4", "succeeded", 30, "EUR", at.replace(microsecond=0)),
    }
    assert (made.lines, made.lines_matched, made.confirmed) == (3, 2, 2)


def test_a_refund_that_failed_is_kept_as_a_failed_line_of_the_refund(setup, make_effect):
    at = setup.claim
    parent = make_effect("confirmed", tool="stmt_pay", provider_ref="pi_p", attempt=1,
                         request={"amount": "5.00", "currency": "EUR"})  # fmt: skip
    refund = make_effect("confirmed", tool="stmt_refund", kind="compensation", parent=parent,
                         provider_ref="re_9", attempt=1,
                         request={"amount": "5.00", "currency": "EUR"})  # fmt: skip
    key = {"ledger_key": refund.idempotency_key}
    content = report([
        moved(at, "refund", -500, n=8, source="re_9", refund_metadata=key),
        moved(at + timedelta(hours=1), "refund_failure", 500, n=9, source="re_9",
              refund_metadata=key),
    ])  # fmt: skip
    made = run_import(setup.period, [], content=content, filename="stripe-report.csv")
    kept = StatementLine.objects.filter(statement=made).order_by("line_no")
    assert [(x.type, x.status, x.amount_minor, x.provider_ref, x.effect_id) for x in kept] == [
        ("refund", "succeeded", 500, "re_9", refund.pk),
        ("refund", "failed", 500, "re_9", refund.pk),
    ]


def test_zero_decimal_currencies_are_read_in_their_own_unit(setup, make_effect):
    at = setup.claim
    effect = dispatched(make_effect, [(at, at + timedelta(minutes=1))],
                        request={"amount": "1000", "currency": "JPY"})  # fmt: skip
    content = report([
        Movement(id="txn_y", created=int(at.timestamp()) + 5, currency="jpy", amount=1000,
                 reporting_category="charge", source="ch_y", payment_intent="pi_y",
                 payment_metadata={"ledger_key": effect.idempotency_key}),
    ])  # fmt: skip
    assert b",jpy,1000," in content
    run_import(setup.period, [], content=content, filename="stripe-report.csv")
    assert fresh(effect).status == "confirmed"


@pytest.mark.parametrize(
    ("field", "value", "column"),
    [
        ("gross", "12,5O", "'gross' (amount)"),
        ("gross", "-12.50", "'gross' (amount)"),  # a charge going back is no charge
        ("currency", "eurx", "'currency'"),
        ("created_utc", "2020-01-01 00:00:00", "'created_utc' (occurred_at)"),
        ("created_utc", "yesterday", "'created_utc' (occurred_at)"),
        ("source_id", "", "'source_id' (provider_ref)"),
    ],
)
def test_a_malformed_line_refuses_the_report_naming_line_and_column(
    setup, make_effect, field, value, column
):
    at = setup.claim
    effect = dispatched(make_effect, [(at, at + timedelta(minutes=1))])
    good = moved(at, "charge", 1250, payment_intent="pi_1",
                 payment_metadata={"ledger_key": effect.idempotency_key})  # fmt: skip
    rows = [line(good, COLUMNS), line(good, COLUMNS), line(good, COLUMNS)]
    rows[2][COLUMNS.index(field)] = value
    if field == "source_id":
        rows[2][COLUMNS.index("payment_intent_id")] = ""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([COLUMNS, *rows])

    with pytest.raises(StatementError) as refused:
        run_import(setup.period, [], content=out.getvalue().encode(), filename="r.csv")

    assert str(refused.value).startswith(f"line 4, column {column}:"), str(refused.value)
    assert not StatementImport.objects.exists() and not StatementLine.objects.exists()
    assert fresh(effect).status == "unknown"


def test_a_report_without_the_columns_that_match_effects_is_refused_at_its_header(setup):
    content = report([moved(setup.claim, "charge", 1250)], columns=list(DEFAULT_COLUMNS))
    with pytest.raises(StatementError) as refused:
        run_import(setup.period, [], content=content, filename="r.csv")
    message = str(refused.value)
    assert message.startswith("line 1: missing column(s)")
    assert "'payment_intent_id'" in message and repr(PAYMENT_KEY) in message
    assert repr(REFUND_KEY) in message
    assert not StatementImport.objects.exists()


def test_a_line_with_a_value_missing_is_refused(setup):
    content = report([moved(setup.claim, "charge", 1250, payment_intent="pi_1")])
    broken = content.replace(b",pi_1,", b",pi_1", 1)
    with pytest.raises(StatementError, match=r"^line 2: 13 values where the header has 14"):
        run_import(setup.period, [], content=broken, filename="r.csv")


# --- The fetch, through the SDK, from the Reporting API's sandbox -----------------------------


@pytest.fixture
def reporting_api(start_sandbox, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk_test_reporting")
    api = start_sandbox("stripe_reporting")
    api.config = {"api_key_env": KEY_ENV, "base_url": api.url, "report_poll": 0.1,
                  "report_wait": 10, "timeout": 5}  # fmt: skip
    return api


def post_movements(api: Any, movements: list[Movement]) -> None:
    answer = api.http.post("/_sandbox/movements", json={"data": [asdict(m) for m in movements]})
    assert answer.status_code == 200, answer.text


def test_the_report_is_fetched_through_the_sdk_and_settles_the_effect(
    setup, make_effect, reporting_api
):
    at = setup.claim
    effect = dispatched(make_effect, [(at, at + timedelta(minutes=1))])
    key = {"ledger_key": effect.idempotency_key}
    post_movements(reporting_api, [
        moved(at + timedelta(seconds=3), "charge", 1250, payment_intent="pi_f",
              payment_metadata=key),
        moved(setup.period[1] + timedelta(seconds=1), "charge", 999, n=2),  # the next day
    ])  # fmt: skip

    name, content = reporting.fetch_statement(
        reporting_api.config, "test", setup.period[0], setup.period[1]
    )

    assert name.endswith(".csv") and name.startswith("stripe-balance-change-")
    header, *lines = list(csv.reader(io.StringIO(content.decode())))
    assert header == COLUMNS and len(lines) == 1
    assert dict(zip(header, lines[0], strict=True))[PAYMENT_KEY] == effect.idempotency_key
    run_import(setup.period, [], content=content, filename=name)
    assert (fresh(effect).status, fresh(effect).provider_ref) == ("confirmed", "pi_f")


def test_what_the_sandbox_answers_is_what_the_sdk_parses(reporting_api):
    import stripe

    sdk = reporting.client(reporting_api.config, "test")
    now = int(datetime.now(UTC).timestamp())
    run = sdk.v1.reporting.report_runs.create(
        params={"report_type": "balance_change_from_activity.itemized.3",
                "parameters": {"interval_start": now - 86400, "interval_end": now - 60}}
    )  # fmt: skip
    assert isinstance(run, stripe.reporting.ReportRun) and run.status == "pending"
    assert run.result is None and run.parameters.columns == list(DEFAULT_COLUMNS)
    kind = sdk.v1.reporting.report_types.retrieve("balance_change_from_activity.itemized.3")
    assert isinstance(kind, stripe.reporting.ReportType) and kind.data_available_end >= now - 1
    reporting_api.wait_for(lambda: sdk.v1.reporting.report_runs.retrieve(run.id).result)
    done = sdk.v1.reporting.report_runs.retrieve(run.id)
    assert done.status == "succeeded" and isinstance(done.result, stripe.File)
    # Shaped as Stripe's own example objects (`stripe_examples`).
    assert set(done.to_dict()) == stripe_examples.REPORT_RUN
    assert set(done.result.to_dict()) == stripe_examples.FILE
    assert (done.result.purpose, done.result.type) == ("finance_report_run", "csv")
    assert done.result.url == f"{reporting_api.url}/v1/files/{done.result.id}/contents"
    with pytest.raises(stripe.InvalidRequestError):
        sdk.v1.reporting.report_runs.create(params={"report_type": "payouts.itemized.3"})


def test_a_run_still_pending_after_the_wait_is_a_fetch_error(setup, reporting_api):
    config = {**reporting_api.config, "report_poll": 0.05, "report_wait": 0.1}
    with pytest.raises(StatementFetchError, match="still pending"):
        reporting.fetch_statement(config, "test", *setup.period)


def test_a_provider_error_is_a_fetch_error(setup, reporting_api):
    reporting_api.set_faults(fail5xx=503)
    config = {**reporting_api.config, "timeout": 2}
    with pytest.raises(StatementFetchError, match="Stripe answered"):
        reporting.fetch_statement(config, "test", *setup.period)


def test_data_not_yet_available_is_a_fetch_error(reporting_api):
    now = datetime.now(UTC)
    with pytest.raises(StatementFetchError, match="reaches only"):
        reporting.fetch_statement(reporting_api.config, "test", now - timedelta(days=1),
                                  now + timedelta(hours=1))  # fmt: skip


def test_the_key_goes_only_to_the_files_host_and_must_be_set(monkeypatch):
    config = {"api_key_env": KEY_ENV}
    monkeypatch.setenv(KEY_ENV, "sk_test_x")
    with pytest.raises(StatementFetchError, match=r"not on https://files\.stripe\.com"):
        reporting.download(config, "test", "https://files.example.com/v1/files/f/contents")
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(StatementFetchError, match="no Stripe secret key"):
        reporting.fetch_statement(config, "test", datetime(2026, 1, 1, tzinfo=UTC),
                                  datetime(2026, 1, 2, tzinfo=UTC))  # fmt: skip


def test_the_interval_covers_the_period_in_whole_seconds():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert reporting.interval(start, start + timedelta(days=1)) == (1767225600, 1767312000)
    assert reporting.interval(start + timedelta(microseconds=1), start + timedelta(seconds=1.5)) \
        == (1767225601, 1767225602)  # fmt: skip


@pytest.mark.django_db(transaction=True)  # the database's clock must pass the period's end
def test_the_payments_sandboxs_stripe_face_serves_the_report_of_what_it_charged(
    setup, start_sandbox, make_effect, monkeypatch
):
    import stripe

    monkeypatch.setenv(KEY_ENV, "sk_test_face")
    face = start_sandbox("payments")
    config = {"api_key_env": KEY_ENV, "base_url": face.url, "report_poll": 0.1}
    effect = dispatched(make_effect, [(setup.claim, setup.claim + timedelta(minutes=1))])
    began = datetime.now(UTC).replace(microsecond=0)
    sdk = stripe.StripeClient("sk_test_face", base_addresses={"api": face.url})
    intent = sdk.v1.payment_intents.create(
        params={"amount": 1250, "currency": "eur", "confirm": True,
                "payment_method": "pm_card_visa",
                "metadata": {"ledger_key": effect.idempotency_key}},
        options={"idempotency_key": effect.idempotency_key},
    )  # fmt: skip
    assert intent.status == "succeeded"
    time.sleep(1.1)  # the report's period is over: whole seconds up to now
    period = (began - timedelta(seconds=5), datetime.now(UTC).replace(microsecond=0))

    name, content = reporting.fetch_statement(config, "test", *period)

    (row,) = csv.DictReader(io.StringIO(content.decode()))
    assert (row["payment_intent_id"], row[PAYMENT_KEY]) == (intent.id, effect.idempotency_key)
    assert (row["reporting_category"], row["gross"], row["currency"]) == ("charge", "12.50", "eur")
    import_statement(
        "stmt_pay", content, filename=name, period_start=period[0], period_end=period[1],
        provisional=True, by="shell:tester", origin="command",
    )  # fmt: skip
    assert (fresh(effect).status, fresh(effect).provider_ref) == ("confirmed", intent.id)


def test_a_stripe_tool_reads_statements_in_stripes_report_and_no_other_format(db, tmp_path):
    from ledger.policy.toolfile import ToolFileError, load

    table = """
[tools.stripe_pay]
preset = "idempotent"
mode = "test"
has_lookup = true
key_ttl = "24h"
amount_path = "amount"
currency_path = "currency"
amount_unit = "major"
statements = true
fetch_statements = true
statement_format = "{format}"
reconciler = "stripe"
reconciler_config = {{ api_key_env = "{env}" }}
"""
    path = tmp_path / "tools.toml"
    path.write_text(table.format(format=NAME, env=KEY_ENV))
    load(path)
    tool = Tool.objects.get(name="stripe_pay")
    assert (tool.statement_format, tool.fetch_statements) == (NAME, True)
    assert named(NAME) is REPORT  # made known by the adapter at startup
    path.write_text(table.format(format="other_report", env=KEY_ENV))
    with pytest.raises(ToolFileError, match="statement_format"):
        load(path)
