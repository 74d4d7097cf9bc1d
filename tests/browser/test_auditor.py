"""Auditors in Chromium: they read everything and change nothing, download exports, and find
an altered event with the chain verifier."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from playwright.sync_api import expect

from ledger.audit import seal
from ledger.effects.transitions import record_event
from ledger.models import AuditExport, Effect, EffectEvent, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from tests.browser.conftest import nav
from tests.helpers import ROOT

pytestmark = pytest.mark.browser


@pytest.fixture
def head_file(tmp_path, settings) -> Path:
    """Chain heads exported to a file of this test's own, never the repository's var/."""
    settings.LEDGER_CHAIN_HEAD_FILE = str(tmp_path / "chain-heads.jsonl")
    return Path(settings.LEDGER_CHAIN_HEAD_FILE)


def test_an_auditor_sees_no_decision_controls_and_a_forged_decision_is_refused(
    signed_in, live_server, audrey, make_effect
):
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.NO_LOOKUP)
    page = signed_in(audrey)
    expect(page.locator("header .who")).to_contain_text("(read only)")

    nav(page, "Review queue")
    row = page.locator(f"tr#item-{ReviewItem.objects.get(effect=effect).pk}")
    expect(row.get_by_role("link", name="Open")).to_be_visible()
    expect(row.get_by_role("button")).to_have_count(0)
    expect(row.locator("select")).to_have_count(0)

    row.get_by_role("link", name="Open").click()
    expect(page.locator("#effect-status")).to_have_text("unknown")
    expect(page.locator("details[id^='decide-']")).to_have_count(0)
    expect(page.locator("form[action*='/decide/']")).to_have_count(0)

    events_before = EffectEvent.objects.count()
    token = page.locator("input[name=csrfmiddlewaretoken]").first.input_value()
    forged = page.request.post(
        f"{live_server.url}/effects/{effect.id}/decide/confirm",
        form={
            "csrfmiddlewaretoken": token,
            "version": str(effect.version),
            "provider_ref": "ch_forged",
            "evidence": "none",
            "reason": "forged",
            "confirm": "on",
        },
        max_redirects=0,
    )
    assert forged.status == 403
    # Refused for the role, not for a missing CSRF token: the request was otherwise sound.
    assert "CSRF" not in forged.text()

    moved = Effect.objects.get(pk=effect.pk)
    assert (moved.status, moved.version, moved.provider_ref) == ("unknown", effect.version, "")
    assert not Effect.objects.filter(parent=effect).exists()
    assert ReviewItem.objects.get(effect=effect).resolved_at is None
    assert EffectEvent.objects.count() == events_before


def test_an_auditor_downloads_exports_whose_rows_match_the_database(signed_in, audrey, make_effect):
    charges = [make_effect("confirmed") for _ in range(3)] + [make_effect("unknown")]
    emails = [make_effect("confirmed", tool="send_email") for _ in range(2)]
    for n, effect in enumerate(charges + emails):
        for step in range(n % 3 + 1):
            record_event(effect.id, kind="transition", actor="test", reason=f"step {step}")

    page = signed_in(audrey)
    nav(page, "Exports")
    page.get_by_label("Status").select_option("confirmed")
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Effects as CSV").click()
    download = download_info.value
    assert download.suggested_filename.startswith("ledger-effects-")
    assert download.suggested_filename.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text(encoding="utf-8"))))
    confirmed = Effect.objects.filter(status="confirmed")
    assert len(rows) == confirmed.count() == 5
    assert {row["id"] for row in rows} == {str(e.id) for e in confirmed}
    assert {row["status"] for row in rows} == {"confirmed"}

    page.get_by_label("Status").select_option("")
    page.get_by_label("Tool").fill("charge_card")
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Events as JSON Lines").click()
    text = Path(download_info.value.path()).read_text(encoding="utf-8")
    events = [json.loads(line) for line in text.splitlines()]
    on_charges = EffectEvent.objects.filter(effect__tool="charge_card")
    assert len(events) == on_charges.count() == 1 + 2 + 3 + 1
    assert {e["id"] for e in events} == set(on_charges.values_list("id", flat=True))

    records = AuditExport.objects.order_by("id")
    assert [(r.dataset, r.format, r.rows) for r in records] == [
        ("effects", "csv", 5),
        ("events", "jsonl", 7),
    ]
    assert all(r.username == "audrey" and r.finished_at for r in records)


def test_the_chain_page_and_verifyledger_name_an_event_altered_in_sql(
    signed_in, audrey, make_effect, head_file
):
    effect = make_effect("unknown")
    for step in range(4):
        record_event(effect.id, kind="transition", actor="test", reason=f"step {step}")
    assert seal.seal_pending() == 4
    page = signed_in(audrey)
    nav(page, "Audit chain")
    page.get_by_role("button", name="Verify now").click()
    expect(page.locator("#chain-verdict")).to_contain_text("Intact.")

    altered = EffectEvent.objects.order_by("id").values_list("id", flat=True)[2]
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE ledger_effectevent DISABLE TRIGGER USER")
        try:
            cursor.execute(
                "UPDATE ledger_effectevent SET reason = 'nothing happened' WHERE id = %s",
                [altered],
            )
        finally:
            cursor.execute("ALTER TABLE ledger_effectevent ENABLE TRIGGER USER")

    page.get_by_role("button", name="Verify now").click()
    verdict = page.locator("#chain-verdict")
    expect(verdict).to_contain_text(f"Broken at seal 3 (event {altered}): hash mismatch")
    expect(verdict).to_contain_text("this is the only link that fails")

    db = connection.settings_dict
    command = subprocess.run(
        [sys.executable, "manage.py", "verifyledger"],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}"
            f"/{db['NAME']}",
            "LEDGER_CHAIN_HEAD_FILE": str(head_file),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert command.returncode == 1, command.stdout + command.stderr
    assert f"BROKEN at seal 3 (event {altered}): hash mismatch" in command.stdout
