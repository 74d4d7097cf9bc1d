"""The operators' side of provider statements: the statements page (uploading one), the
incidents it opens (acknowledging one), their place in the queue and the overview, severity
badges, and the provider's record on the effect page. Through the Django test client; the
browser test drives the same pages in Chromium."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client

from ledger.models import Effect, Incident, Reason, ReviewItem, StatementImport
from ledger.models.states import Kind
from ledger.rules.reviewqueue import open_review
from ledger.statements import import_statement
from reviews.views import statements as statements_view
from tests.factories import signed_in

HEADER = "provider_ref,reference,amount,currency,status,occurred_at,type"


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def day(days_ago: int) -> tuple[datetime, datetime]:
    """The UTC day `days_ago` days before today: a period that is over."""
    start = db_now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start -= timedelta(days=days_ago)
    return start, start + timedelta(days=1)


def statement(*lines: tuple[str, str, str, str, str, datetime]) -> bytes:
    """A CSV statement: (provider_ref, reference, amount, currency, status, occurred_at)."""
    rows = [HEADER] + [",".join([*line[:5], line[5].isoformat(), "charge"]) for line in lines]
    return ("\n".join(rows) + "\n").encode()


def form_fields(period: tuple[datetime, datetime], **extra: object) -> dict[str, object]:
    start, end = period
    return {
        "tool": "charge_card",
        "period_start": start.strftime("%Y-%m-%dT%H:%M"),
        "period_end": end.strftime("%Y-%m-%dT%H:%M"),
        **extra,
    }


def upload(client: Client, content: bytes, period, name: str = "stmt.csv", **extra: object):
    fields = form_fields(period, **extra)
    fields.setdefault("file", SimpleUploadedFile(name, content, content_type="text/csv"))
    return client.post("/statements/upload", fields)


def orphan_incident(stmt_tool, ref: str = "ch_unknown_1", amount: str = "25.00") -> Incident:
    """A line no effect intended, in a final statement whose next period's is in too."""
    first, second = day(2), day(1)
    for period, lines in (
        (first, [(ref, "no-such-key", amount, "EUR", "succeeded", first[0] + timedelta(hours=3))]),
        (second, []),
    ):
        import_statement(
            "charge_card",
            statement(*lines),
            filename="provider.csv",
            period_start=period[0],
            period_end=period[1],
            provisional=False,
            by="shell:test",
            origin="command",
        )
    return Incident.objects.get(line__provider_ref=ref)


# --- Who may do what -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/statements/", "/incidents/"])
def test_someone_signed_out_is_sent_to_sign_in(db, path):
    response = Client().get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_an_auditor_reads_both_pages_but_can_neither_upload_nor_acknowledge(audrey, stmt_tool):
    incident = orphan_incident(stmt_tool)
    client = signed_in(audrey)
    page = client.get("/statements/")
    assert page.status_code == 200 and 'id="statement-form"' not in page.content.decode()
    assert "no-store" in page["Cache-Control"]
    listed = client.get("/incidents/").content.decode()
    assert "ch_unknown_1" in listed and "/acknowledge" not in listed
    refused = upload(client, statement(), day(3))
    assert refused.status_code == 403
    assert StatementImport.objects.count() == 2
    answer = client.post(f"/incidents/{incident.pk}/acknowledge", {"note": "seen"})
    assert answer.status_code == 403
    incident.refresh_from_db()
    assert incident.acknowledged_at is None


def test_someone_with_no_role_sees_neither_page(nemo):
    client = signed_in(nemo)
    assert client.get("/statements/").status_code == 403
    assert client.get("/incidents/").status_code == 403


def test_the_navigation_links_both_pages_for_readers(audrey):
    html = signed_in(audrey).get("/").content.decode()
    assert 'href="/statements/"' in html and 'href="/incidents/"' in html


def test_an_upload_without_its_csrf_token_is_refused(olga, stmt_tool):
    client = Client(enforce_csrf_checks=True)
    client.force_login(olga)
    assert upload(client, statement(), day(1)).status_code == 403
    assert not StatementImport.objects.exists()


# --- Uploading -------------------------------------------------------------------------------


def test_the_tool_choice_lists_only_tools_that_declare_statements(olga, stmt_tool):
    form = signed_in(olga).get("/statements/").context["form"]
    assert [name for name, _ in form.fields["tool"].choices] == ["charge_card"]


def test_an_operator_uploads_a_statement_and_sees_what_it_did(olga, stmt_tool, make_effect):
    effect = make_effect("unknown", attempt=1, request={"amount": "10.00", "currency": "EUR"})
    period = day(1)
    content = statement(
        ("ch_1", effect.idempotency_key, "10.00", "EUR", "succeeded", period[0]),
        ("ch_2", "someone-else", "3.50", "EUR", "succeeded", period[0] + timedelta(hours=1)),
    )
    client = signed_in(olga)
    response = upload(client, content, period, provisional="on")
    assert response.status_code == 302 and response["Location"] == "/statements/"
    made = StatementImport.objects.get()
    assert (made.tool, made.origin, made.imported_by) == ("charge_card", "upload", "operator:olga")
    assert (made.period_start, made.period_end, made.provisional) == (*period, True)
    assert (made.lines, made.lines_matched, made.phase) == (2, 1, "done")
    page = client.get("/statements/")
    html = page.content.decode()
    assert f"Imported stmt.csv (provisional, charge_card) as import {made.pk}: 2 lines" in html
    row = html.split(f'id="import-{made.pk}"')[1].split("</tr>")[0]
    assert made.sha256[:12] in row and f'title="SHA-256 {made.sha256}"' in row
    assert "operator:olga" in row and "provisional" in row and "done" in row


def test_the_period_is_read_as_utc(olga, stmt_tool, settings):
    settings.TIME_ZONE = "America/New_York"
    period = day(1)
    upload(signed_in(olga), statement(), period)
    assert StatementImport.objects.get().period_start == period[0]


def test_a_refused_file_shows_why_and_imports_nothing(olga, stmt_tool):
    period = day(1)
    bad = statement(("ch_1", "ref", "ten euros", "EUR", "succeeded", period[0]))
    response = upload(signed_in(olga), bad, period)
    assert response.status_code == 422
    problem = response.content.decode().split('id="statement-problem"')[1].split("</div>")[0]
    assert "nothing was imported" in problem and "line 2" in problem and "amount" in problem
    assert not StatementImport.objects.exists()


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"file": ""}, "file", "Choose the statement file to upload"),
        ({"tool": "send_email"}, "tool", "Select a valid choice"),
        ({"tool": "no_such_tool"}, "tool", "Select a valid choice"),
        ({"period_start": "yesterday"}, "period_start", "Enter a valid date/time"),
        ({"period_end": ""}, "period_end", "This field is required"),
        ({"swap": True}, "period_end", "The period must end after it starts"),
    ],
)
def test_bad_input_is_shown_on_the_form_never_a_500(olga, stmt_tool, change, field, says):
    period = day(1)
    if change.pop("swap", False):
        period = (period[1], period[0])
    fields = {**form_fields(period, file=SimpleUploadedFile("s.csv", statement())), **change}
    response = signed_in(olga).post("/statements/upload", fields)
    assert response.status_code == 422
    form = response.context["form"]
    assert any(says in error for error in form.errors[field]), form.errors
    assert says in response.content.decode().replace("&#x27;", "'")
    assert not StatementImport.objects.exists()


def test_a_file_of_the_wrong_kind_or_a_period_not_over_is_refused(olga, stmt_tool):
    client = signed_in(olga)
    wrong = upload(client, statement(), day(1), name="statement.xlsx")
    assert wrong.status_code == 422 and ".csv or .jsonl" in wrong.content.decode()
    start = db_now().replace(microsecond=0) - timedelta(hours=1)
    future = upload(client, statement(), (start, start + timedelta(days=2)))
    assert future.status_code == 422 and "ends in the future" in future.content.decode()
    assert not StatementImport.objects.exists()


def test_a_file_past_the_size_limit_is_not_read_on(olga, stmt_tool, monkeypatch):
    monkeypatch.setattr(statements_view, "STATEMENT_MAX_BYTES", 100)
    period = day(1)
    lines = [(f"ch_{i}", "r", "1.00", "EUR", "succeeded", period[0]) for i in range(5)]
    response = upload(signed_in(olga), statement(*lines), period)
    assert response.status_code == 413
    assert "The file is larger than" in response.content.decode()
    assert not StatementImport.objects.exists()


def test_the_imports_are_listed_newest_first_and_paged(olga, stmt_tool, monkeypatch):
    monkeypatch.setattr(statements_view, "PAGE_SIZE", 2)
    for days_ago in (4, 3, 2):
        import_statement(
            "charge_card",
            statement(),
            filename=f"day-{days_ago}.csv",
            period_start=day(days_ago)[0],
            period_end=day(days_ago)[1],
            provisional=True,
            by="shell:test",
            origin="command",
        )
    client = signed_in(olga)
    first = client.get("/statements/").context["page"]
    assert [m.filename for m in first] == ["day-2.csv", "day-3.csv"] and first.has_next()
    assert [m.filename for m in client.get("/statements/?page=2").context["page"]] == ["day-4.csv"]
    assert client.get("/statements/?page=last").status_code == 200


# --- Incidents -------------------------------------------------------------------------------


def test_an_orphan_line_is_an_open_incident_gravest_first_with_its_amount(olga, stmt_tool):
    incident = orphan_incident(stmt_tool)
    Incident.objects.filter(pk=incident.pk).update(due_at=incident.opened_at - timedelta(hours=1))
    html = signed_in(olga).get("/incidents/").content.decode()
    row = html.split(f'id="incident-{incident.pk}"')[1].split("</tr>")[0]
    assert "ch_unknown_1" in row and "25.00 EUR" in row
    assert 'class="severity severity-high"' in row and 'class="overdue"' in row
    assert f'action="/incidents/{incident.pk}/acknowledge"' in row


def test_acknowledging_closes_the_incident_and_records_a_decision(olga, otto, stmt_tool):
    incident = orphan_incident(stmt_tool)
    client = signed_in(olga)
    response = client.post(
        f"/incidents/{incident.pk}/acknowledge", {"note": "Refunded by the provider, ticket 9"}
    )
    assert response.status_code == 302 and response["Location"] == "/incidents/"
    incident.refresh_from_db()
    assert incident.acknowledged_by == olga and incident.note.startswith("Refunded")
    decision = Effect.objects.get(pk=incident.decision_id)
    assert decision.kind == Kind.DECISION and decision.provenance["action"] == "acknowledge"
    html = client.get("/incidents/").content.decode()
    assert "No open incidents." in html and "Refunded by the provider, ticket 9" in html
    assert "acknowledged" in html and "by olga" in html
    # Someone else, a moment late, is told who was first.
    late = signed_in(otto).post(f"/incidents/{incident.pk}/acknowledge", {"note": "me too"})
    assert late.status_code == 409 and "acknowledged by olga" in late.content.decode()


def test_an_acknowledgement_needs_a_note(olga, stmt_tool):
    incident = orphan_incident(stmt_tool)
    response = signed_in(olga).post(f"/incidents/{incident.pk}/acknowledge", {"note": "  "})
    assert response.status_code == 422
    row = response.content.decode().split(f'id="incident-{incident.pk}"')[1].split("</tr>")[0]
    assert "This field is required" in row
    incident.refresh_from_db()
    assert incident.acknowledged_at is None


def test_acknowledging_no_such_incident_is_a_404(olga, db):
    assert signed_in(olga).post("/incidents/999999/acknowledge", {"note": "x"}).status_code == 404


def test_the_queue_and_the_overview_point_to_open_incidents(olga, stmt_tool):
    client = signed_in(olga)
    assert 'id="incident-banner"' not in client.get("/queue/").content.decode()
    orphan_incident(stmt_tool)
    queue = client.get("/queue/").content.decode()
    banner = queue.split('id="incident-banner"')[1].split("</p>")[0]
    assert "1 open incident" in banner and 'href="/incidents/"' in banner
    overview = client.get("/").content.decode()
    assert "1 open incident" in overview.split('id="open-incidents"')[1].split("</p>")[0]


# --- Severity and the effect page ------------------------------------------------------------


def test_severity_shows_on_the_queue_and_the_effect_page_and_filters_the_queue(olga, make_effect):
    duplicate = make_effect("confirmed", provider_ref="ch_1")
    plain = make_effect("unknown", attempt=1)
    open_review(duplicate.id, Reason.DUPLICATE)
    open_review(plain.id, Reason.INCONCLUSIVE)
    client = signed_in(olga)
    html = client.get("/queue/").content.decode()
    row = html.split(f'data-effect="{duplicate.id}"')[1].split("</tr>")[0]
    assert 'class="severity severity-high"' in row
    other = html.split(f'data-effect="{plain.id}"')[1].split("</tr>")[0]
    assert 'class="severity severity-normal"' in other
    high = client.get("/queue/?severity=high").context["page"]
    assert [item.effect_id for item in high] == [duplicate.id]
    assert client.get("/queue/?severity=urgent").status_code == 400
    detail = client.get(f"/effects/{duplicate.id}/").content.decode()
    assert 'severity-high" id="review-severity">high</span>' in detail


def test_a_held_row_keeps_its_severity(olga, make_effect):
    effect = make_effect("confirmed", provider_ref="ch_1")
    open_review(effect.id, Reason.DUPLICATE)
    item = ReviewItem.objects.get(effect=effect)
    row = signed_in(olga).post(f"/queue/{item.pk}/hold", headers={"HX-Request": "true"})
    assert 'class="severity severity-high"' in row.content.decode()


def test_the_effect_page_shows_the_providers_record_and_its_events(olga, stmt_tool, make_effect):
    effect = make_effect("unknown", attempt=1, request={"amount": "10.00", "currency": "EUR"})
    period = day(1)
    line = ("ch_77", effect.idempotency_key, "10.00", "EUR", "succeeded", period[0])
    import_statement(
        "charge_card",
        statement(line),
        filename="provider.csv",
        period_start=period[0],
        period_end=period[1],
        provisional=False,
        by="shell:test",
        origin="command",
    )
    made = StatementImport.objects.get()
    html = signed_in(olga).get(f"/effects/{effect.id}/").content.decode()
    lines = html.split('id="statement-lines"')[1].split("</table>")[0]
    assert "ch_77" in lines and "10.00 EUR" in lines and "charge, succeeded" in lines
    assert f"import {made.pk}</a>, line 2" in lines and "final" in lines and "current" in lines
    timeline = html.split('id="timeline"')[1].split("</table>")[0]
    assert f"provider statement, import {made.pk}" in timeline


def test_the_timeline_reads_every_kind_of_event(olga, make_effect):
    effect = make_effect("unknown", attempt=1)
    with connection.cursor() as cursor:
        for kind, reason, data in (
            ("statement", "line_removed", '{"statement": 4, "removed": {"provider_ref": "ch_9"}}'),
            ("review_closed", "settled", '{"review_item": 1, "item_reason": "no_lookup"}'),
            ("retention_purge", "redacted", '{"fields": ["request"]}'),
            ("late_outcome", "stale_lease", '{"provider_ref": "ch_2"}'),
            ("statement", "confirm", '{"redacted": true}'),
        ):  # fmt: skip
            cursor.execute(
                "INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status, "
                "reason, data, digest) VALUES (%s, %s, 'system:test', 'unknown', 'unknown', %s, "
                "%s::jsonb, %s)",
                [effect.id, kind, reason, data, "0" * 64],
            )
    response = signed_in(olga).get(f"/effects/{effect.id}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "its line ch_9 was removed by a revision" in html
    assert "(no_lookup) was closed by the machine" in html
    assert "retention redacted the payloads" in html
    assert "refused, kept as evidence" in html
    assert "provider statement: confirm" in html
