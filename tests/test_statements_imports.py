"""Statement imports as a whole: bad files refused with nothing applied, the audit record,
revisions, orphans and their incidents, batches and resuming, the command, the ISO 4217
table."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command

from ledger.errors import ValidationFailed
from ledger.models import (
    Alert,
    Effect,
    Incident,
    Reason,
    ReviewItem,
    Severity,
    StatementImport,
    StatementLine,
    Tool,
)
from ledger.policy import iso4217, money
from ledger.statements import (
    AlreadyAcknowledged,
    StatementError,
    acknowledge_incident,
    already_imported,
    incident_queue,
    resume,
)
from ledger.statements import apply as applying
from tests.test_statements_support import (
    HEADER,
    day,
    db_now,
    dispatched,
    line,
    load_tools,
    run_import,
    statement_csv,
)


@pytest.fixture
def setup(db, tmp_path, make_effect):
    load_tools(tmp_path)
    now = db_now()
    period = day(now, 2)
    return SimpleNamespace(now=now, period=period, claim=period[0] + timedelta(hours=10))


def fresh(effect: Effect) -> Effect:
    return Effect.objects.get(pk=effect.pk)


# --- Bad files: refused, nothing applied -----------------------------------------------------


def _bad_files(period, claim, first):
    """Each bad file: a good first line (for an effect it would confirm), then the fault."""
    good = line(None, claim, reference="el_x", n=2)
    at = claim.isoformat()

    def file(*rows, header=HEADER):
        return statement_csv([first, *rows], header=header)

    outside = (period[1] + timedelta(seconds=1)).isoformat()
    return {
        "missing column": (
            file(good, header=HEADER[:2] + HEADER[3:]), "line 1: missing column(s) 'amount'",
        ),
        "bad date": (file({**good, "occurred_at": "yesterday"}), "line 3, column 'occurred_at'"),
        "date without offset": (
            file({**good, "occurred_at": claim.replace(tzinfo=None).isoformat()}),
            "line 3, column 'occurred_at'",
        ),
        "line outside the period": (
            file(good, {**good, "occurred_at": outside}), "line 4, column 'occurred_at'",
        ),
        "bad amount": (file(good, {**good, "amount": "12,50"}), "line 4, column 'amount'"),
        "too many decimals": (file({**good, "amount": "12.505"}), "more decimal places"),
        "negative charge": (file({**good, "amount": "-1.00"}), "negative on a charge"),
        "unknown currency": (file({**good, "currency": "EUX"}), "'EUX' is not an active"),
        "currency without minor unit": (file({**good, "currency": "XAU"}), "no minor unit"),
        "unknown status": (file({**good, "status": "weird"}), "line 3, column 'status'"),
        "unknown type": (file({**good, "type": "gift"}), "line 3, column 'type'"),
        "ragged row": (file() + f"p,r,1.00,EUR,succeeded,{at}\n".encode(), "line 3: 6 values"),
        "empty provider ref": (file({**good, "provider_ref": ""}), "line 3, column 'provider_ref'"),
        "not UTF-8": (file(good) + b"\xff\xfe\n", "not UTF-8"),
    }  # fmt: skip


BAD = [
    "missing column", "bad date", "date without offset", "line outside the period", "bad amount",
    "too many decimals", "negative charge", "unknown currency", "currency without minor unit",
    "unknown status", "unknown type", "ragged row", "empty provider ref", "not UTF-8",
]  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_a_bad_file_is_refused_naming_line_and_column_and_nothing_is_applied(
    setup, make_effect, case
):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    # Its first line would confirm one effect, and the period would prove another absent.
    absent = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    content, message = _bad_files(period, claim, line(effect, claim))[case]
    with pytest.raises(StatementError) as refused:
        run_import(period, [], content=content)
    assert message in str(refused.value)
    assert StatementImport.objects.count() == 0
    assert StatementLine.objects.count() == 0
    assert fresh(effect).status == fresh(absent).status == "unknown"


def test_a_bad_jsonl_line_is_refused_naming_it(setup):
    period, claim = setup.period, setup.claim
    good = json.dumps(line(None, claim, reference="el_x"))
    content = f"{good}\n{{not json\n".encode()
    with pytest.raises(StatementError, match="line 2: not JSON"):
        run_import(period, [], content=content, filename="s.jsonl")
    missing = json.dumps({k: v for k, v in line(None, claim).items() if k != "currency"})
    with pytest.raises(StatementError, match="line 1, column 'currency': is missing"):
        run_import(period, [], content=missing.encode(), filename="s.jsonl")
    assert StatementImport.objects.count() == 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tool": "nope"}, "No tool is named 'nope'"),
        ({"tool": "stmt_refund"}, "does not declare statements"),
        ({"future": True}, "ends in the future"),
        ({"backwards": True}, "is not after period_start"),
        ({"filename": "s.xlsx"}, "a .csv or .jsonl file"),
    ],
)
def test_a_bad_request_is_refused_before_the_file_is_read(setup, change, message):
    now, period = setup.now, setup.period
    tool = change.get("tool", "stmt_pay")
    if change.get("future"):
        period = (now - timedelta(hours=1), now + timedelta(hours=1))
    if change.get("backwards"):
        period = (period[1], period[0])
    with pytest.raises(StatementError, match=message):
        run_import(period, [], tool=tool, filename=change.get("filename", "s.csv"))
    assert StatementImport.objects.count() == 0


def test_the_command_refuses_a_bad_file_with_a_command_error(setup, tmp_path):
    period, claim = setup.period, setup.claim
    path = tmp_path / "bad.csv"
    path.write_bytes(statement_csv([line(None, claim, reference="x", amount="abc")]))
    with pytest.raises(CommandError, match="line 2, column 'amount'"):
        call_command(
            "importstatement", "stmt_pay", str(path),
            "--period-start", period[0].isoformat(), "--period-end", period[1].isoformat(),
        )  # fmt: skip
    assert StatementImport.objects.count() == 0


# --- The audit record, and the command -------------------------------------------------------


def test_an_import_is_audited_and_the_command_shows_its_counts(setup, make_effect, tmp_path):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    path = tmp_path / "day.jsonl"
    content = (json.dumps(line(effect, claim)) + "\n").encode()
    path.write_bytes(content)
    out = io.StringIO()
    call_command(
        "importstatement", "stmt_pay", str(path), "--provisional",
        "--period-start", period[0].isoformat(), "--period-end", period[1].isoformat(), stdout=out,
    )  # fmt: skip
    made = StatementImport.objects.get()
    assert made.sha256 == hashlib.sha256(content).hexdigest()
    assert made.imported_by.startswith("shell:") and made.origin == "command"
    assert (made.period_start, made.period_end, made.provisional) == (*period, True)
    assert (made.lines, made.lines_matched, made.confirmed, made.phase) == (1, 1, 1, "done")
    shown = out.getvalue()
    assert made.sha256 in shown and "effects confirmed: 1" in shown and "provisional" in shown
    assert fresh(effect).status == "confirmed"  # a provisional line still confirms


def test_already_imported_is_true_only_for_periods_covered_by_final_statements(setup):
    period = setup.period
    run_import(period, [], provisional=True)
    assert not already_imported("stmt_pay", *period)
    run_import(period, [])
    assert already_imported("stmt_pay", *period)
    assert not already_imported("stmt_pay", period[0], period[1] + timedelta(hours=1))


# --- Revisions -------------------------------------------------------------------------------


def test_reimporting_the_same_file_stores_and_applies_nothing_twice(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    rows = [line(effect, claim)]
    run_import(period, rows)
    again = run_import(period, rows)
    assert (again.revises, again.lines_unchanged, again.lines_new) == ([again.pk - 1], 1, 0)
    assert StatementLine.objects.filter(removed_by__isnull=True).count() == 1
    assert not ReviewItem.objects.filter(effect=effect).exists()  # no duplicate of itself


def test_a_revision_that_removes_an_applied_line_opens_statement_line_removed(setup, make_effect):
    period, claim = setup.period, setup.claim
    kept = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    dropped = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    first = run_import(period, [line(kept, claim, n=1), line(dropped, claim, n=2)])
    assert fresh(dropped).status == "confirmed"
    revision = run_import(period, [line(kept, claim, n=1)])
    assert (revision.lines_removed, revision.lines_unchanged) == (1, 1)
    old = StatementLine.objects.get(statement=first, effect=dropped)
    assert (old.removed_by_id, old.outcome) == (revision.pk, "removed")
    item = ReviewItem.objects.get(effect=dropped, resolved_at__isnull=True)
    assert item.reason == Reason.STATEMENT_LINE_REMOVED
    assert not ReviewItem.objects.filter(effect=kept).exists()


def test_a_new_line_in_a_revision_for_an_effect_already_retried_opens_duplicate(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    run_import(period, [])
    assert fresh(effect).status == "planned"  # absence proven, to be retried
    revision = run_import(period, [line(effect, claim)])
    assert revision.lines_new == 1
    assert fresh(effect).status == "planned"
    item = ReviewItem.objects.get(effect=effect, resolved_at__isnull=True)
    assert (item.reason, item.severity) == (Reason.DUPLICATE, Severity.HIGH)


def test_a_changed_line_replaces_the_old_one_and_is_applied_again(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    run_import(period, [line(effect, claim, status="pending")], provisional=True)
    assert fresh(effect).status == "unknown"
    final = run_import(period, [line(effect, claim)])
    assert (final.lines_changed, final.lines_removed) == (1, 0)
    assert fresh(effect).status == "confirmed"


# --- Orphans ---------------------------------------------------------------------------------


def test_an_orphan_is_an_incident_only_once_the_next_final_period_is_in(setup, olga, otto):
    now, period, claim = setup.now, setup.period, setup.claim
    orphan = line(None, claim, reference="el_nobody", provider_ref="ch_unknown")
    first = run_import(period, [orphan])
    assert not Incident.objects.exists()
    nxt = day(now, 1)
    run_import(nxt, [], provisional=True)
    assert not Incident.objects.exists()
    run_import(nxt, [])
    incident = Incident.objects.get()
    assert incident.line.provider_ref == "ch_unknown" and incident.severity == Severity.HIGH
    assert incident.due_at > incident.opened_at
    assert StatementImport.objects.get(pk=first.pk).orphans_checked
    assert list(incident_queue()) == [incident]
    # People are told at once, through the alert outbox, once.
    [alert] = Alert.objects.filter(kind="incident_opened")
    assert alert.key == f"incident:{incident.pk}"
    assert (alert.payload["link"], alert.payload["provider_ref"]) == ("/incidents/", "ch_unknown")
    assert alert.payload["amount_minor"] == 1250 and alert.payload["currency"] == "EUR"

    with pytest.raises(ValidationFailed):
        acknowledge_incident(incident.pk, user=olga, note="  ")
    done = acknowledge_incident(incident.pk, user=olga, note="A test charge by finance.")
    assert done.acknowledged_by == olga and done.decision is not None
    assert done.decision.kind == "decision" and done.decision.target == f"incident:{done.pk}"
    assert done.decision.agent.name == "system"
    assert list(incident_queue()) == []
    with pytest.raises(AlreadyAcknowledged, match="acknowledged by olga"):
        acknowledge_incident(incident.pk, user=otto, note="me too")


def test_an_incident_is_due_when_its_lines_back_office_window_closes_if_that_is_sooner(setup):
    # The provider can still void the orphan charge for 3 more hours; resolve_within is 24 h.
    now, claim = setup.now, setup.claim
    Tool.objects.filter(name="stmt_pay").update(backoffice_window=now - claim + timedelta(hours=3))
    run_import(setup.period, [line(None, claim, reference="el_nobody", provider_ref="ch_x")])
    run_import(day(now, 1), [])

    incident = Incident.objects.get()
    assert incident.due_at == now + timedelta(hours=3)
    assert incident.due_at - incident.opened_at == timedelta(hours=3)


def test_fees_and_failed_lines_without_an_effect_are_not_orphans(setup):
    now, period, claim = setup.now, setup.period, setup.claim
    run_import(
        period,
        [
            line(None, claim, provider_ref="fee_1", type="fee"),
            line(None, claim, provider_ref="ch_f", status="failed"),
        ],
    )
    run_import(day(now, 1), [])
    assert not Incident.objects.exists()


# --- Batches and resuming --------------------------------------------------------------------


def test_applying_runs_in_batches_and_resumes_where_a_crash_stopped_it(
    setup, make_effect, monkeypatch
):
    period, claim = setup.period, setup.claim
    effects = [dispatched(make_effect, [(claim, claim + timedelta(minutes=1))]) for _ in range(5)]
    monkeypatch.setattr(applying, "BATCH", 2)
    real = applying.verdicts.verdict_on
    calls = {"n": 0}

    def crash_in_the_second_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(applying.verdicts, "verdict_on", crash_in_the_second_batch)
    rows = [line(e, claim, n=i) for i, e in enumerate(effects)]
    with pytest.raises(RuntimeError):
        run_import(period, rows)
    made = StatementImport.objects.get()
    assert (made.phase, made.batches, made.confirmed) == ("lines", 1, 2)
    ordered = sorted(effects, key=lambda e: str(e.id))
    assert made.cursor == str(ordered[1].id)
    assert [fresh(e).status for e in ordered] == ["confirmed"] * 2 + ["unknown"] * 3

    monkeypatch.setattr(applying.verdicts, "verdict_on", real)
    done = resume(made.pk)
    assert (done.phase, done.confirmed, done.batches) == ("done", 5, 3)
    assert all(fresh(e).status == "confirmed" for e in effects)
    assert done.finished_at is not None


def test_the_command_resumes_an_import_by_id(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    made = run_import(period, [line(effect, claim)])
    StatementImport.objects.filter(pk=made.pk).update(phase="lines", cursor="")
    out = io.StringIO()
    call_command("importstatement", resume=made.pk, stdout=out)
    assert f"Import {made.pk}" in out.getvalue() and "done" in out.getvalue()


# --- The ISO 4217 table ----------------------------------------------------------------------


def test_the_iso4217_table_agrees_with_the_limits_exponents():
    for code, places in money.EXPONENTS.items():
        assert iso4217.EXPONENTS.get(code) == places, code
    others = {c for c, p in iso4217.EXPONENTS.items() if p not in (2, None)}
    # Among them the two four-place index units.
    assert others == set(money.EXPONENTS)
    assert (money.EXPONENTS["CLF"], money.EXPONENTS["UYW"]) == (4, 4)


def test_the_iso4217_table_holds_the_active_codes():
    table = iso4217.EXPONENTS
    assert all(len(code) == 3 and code.isupper() for code in table)
    assert {"EUR": 2, "JPY": 0, "KWD": 3, "XCG": 2, "ZWG": 2}.items() <= table.items()
    assert table["XAU"] is None
    assert not {"BGN", "HRK", "ANG", "CUC", "SLL", "ZWL"} & set(table)  # withdrawn
    assert iso4217.exponent("BHD") == 3
    with pytest.raises(ValueError, match="not an active"):
        iso4217.exponent("DEM")


def test_major_amounts_use_the_currencys_exponent(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1))],
        request={"amount": "1250", "currency": "JPY"},
    )  # fmt: skip
    run_import(period, [line(effect, claim, amount="1250", currency="JPY")])
    assert fresh(effect).status == "confirmed"
    made = StatementImport.objects.get()
    assert StatementLine.objects.get(statement=made).amount_minor == 1250


# --- One staging per tool at a time ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_second_import_of_the_same_tool_waits_for_the_first_to_be_staged(tmp_path):
    import threading

    import psycopg
    from django.db import connection as django_connection

    load_tools(tmp_path)
    period = day(db_now(), 2)
    done = threading.Event()

    def second() -> None:
        try:
            run_import(period, [])
        finally:
            django_connection.close()
            done.set()

    dsn = django_connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as other:
        # What a first import staging right now holds.
        other.execute(
            "SELECT pg_advisory_lock(hashtextextended(%s, 0))", ["ledger.statements:stmt_pay"]
        )
        thread = threading.Thread(target=second)
        thread.start()
        assert not done.wait(1.0)
        assert not StatementImport.objects.exclude(sha256="").exists()
        other.execute(
            "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", ["ledger.statements:stmt_pay"]
        )
    thread.join(30)
    assert done.is_set()
    assert StatementImport.objects.get().phase == "done"
