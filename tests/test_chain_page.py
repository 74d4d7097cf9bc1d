"""The audit chain page: the head, its last export, and "Verify now" naming a broken link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from ledger.audit import seal
from tests.factories import add_event, signed_in, tampering

URL = "/audit/chain/"


@pytest.fixture
def events(make_effect) -> list[int]:
    effect = make_effect()
    ids = [add_event(effect, f"step {n}") for n in range(3)]
    seal.seal_pending()
    return ids


@pytest.fixture
def head_file(tmp_path, settings) -> Path:
    settings.LEDGER_CHAIN_HEAD_FILE = str(tmp_path / "heads.jsonl")
    return Path(settings.LEDGER_CHAIN_HEAD_FILE)


def test_the_page_needs_a_login_and_a_role(nemo):
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/login")
    assert signed_in(nemo).get(URL).status_code == 403


def test_an_auditor_sees_the_head_and_its_last_export_without_verifying(audrey, events, head_file):
    exported = seal.export_head()
    page = signed_in(audrey).get(URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert page.context["head"].seq == 3
    assert html.count(exported["hash"]) == 2
    assert exported["exported_at"] in html
    assert 'action="/audit/chain/"' in html and 'name="verify"' in html
    assert "verdict" not in page.context


def test_verify_now_reports_an_intact_chain(audrey, events, head_file):
    seal.export_head()
    page = signed_in(audrey).get(URL, {"verify": "1"})
    assert page.context["verdict"].intact
    assert "Intact." in page.content.decode()
    assert "3 seals checked" in page.content.decode()
    assert "against 1 exported head" in page.content.decode()


def test_verify_now_names_the_first_broken_link(audrey, events, head_file):
    with tampering() as cursor:
        cursor.execute(
            "UPDATE ledger_effectevent SET reason = 'edited' WHERE id = ANY(%s)", [events[1:]]
        )
    html = signed_in(audrey).get(URL, {"verify": "1"}).content.decode()
    assert f"Broken at seal 2 (event {events[1]}): hash mismatch." in html
    assert "2 links fail" in html
    assert 'role="alert"' in html


def test_verify_now_catches_a_rewrite_against_the_exported_heads(audrey, events, head_file):
    seal.export_head()
    with tampering() as cursor:
        cursor.execute("UPDATE ledger_effectevent SET reason = 'edited' WHERE id = %s", [events[0]])
        cursor.execute("DELETE FROM ledger_eventseal")
    seal.seal_pending()
    html = signed_in(audrey).get(URL, {"verify": "1"}).content.decode()
    assert "Broken at seal 3" in html and "differs from exported head" in html


def test_verify_now_warns_about_events_left_unsealed(olga, events, make_effect, head_file):
    late = add_event(make_effect(), "late")
    with tampering() as cursor:
        cursor.execute(
            "UPDATE ledger_effectevent SET created_at = now() - interval '1 hour' WHERE id = %s",
            [late],
        )
    text = " ".join(signed_in(olga).get(URL, {"verify": "1"}).content.decode().split())
    assert f"1 event unsealed for longer than 300 seconds (the oldest is event {late})" in text


def test_a_damaged_head_file_is_reported_not_a_server_error(audrey, events, head_file):
    head_file.write_text("{broken\n")
    page = signed_in(audrey).get(URL, {"verify": "1"})
    assert page.status_code == 200
    assert "The exported heads cannot be read" in page.content.decode()


def test_the_page_has_no_inline_script_or_style_and_refuses_a_post(audrey, events):
    client = signed_in(audrey)
    html = client.get(URL, {"verify": "1"}).content.decode()
    assert "style=" not in html and "<style" not in html
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", html))
    assert client.post(URL).status_code == 405
