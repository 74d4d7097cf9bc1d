"""The verifier and `manage.py verifyledger`: an intact chain passes, and whatever someone with
database access changes afterwards is named by its first broken link."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from ledger.audit import seal
from ledger.models import EffectEvent
from tests.factories import add_event, tampering
from tests.helpers import ROOT


@pytest.fixture
def events(make_effect) -> list[int]:
    """Five sealed events (seal n covers events[n - 1])."""
    effect = make_effect()
    ids = [add_event(effect, f"step {n}", amount=f"{n}.10") for n in range(1, 6)]
    assert seal.seal_pending() == 5
    return ids


@pytest.fixture
def head_file(tmp_path, settings) -> Path:
    settings.LEDGER_CHAIN_HEAD_FILE = str(tmp_path / "exported" / "heads.jsonl")
    return Path(settings.LEDGER_CHAIN_HEAD_FILE)


def alter(sql: str, *params: object) -> None:
    with tampering() as cursor:
        cursor.execute(sql, params)


def test_an_untouched_chain_is_intact_and_reports_its_head(events):
    verdict = seal.verify()
    assert verdict.intact
    assert verdict.problems == 0
    assert (verdict.head.seq, verdict.head.event_id, verdict.count) == (5, events[-1], 5)
    assert verdict.head.hash == seal.chain_head().hash
    assert verdict.unsealed_late == 0


def test_an_altered_reason_breaks_the_hash_of_that_events_seal_only(events):
    alter("UPDATE ledger_effectevent SET reason = 'nothing happened' WHERE id = %s", events[2])
    verdict = seal.verify()
    assert not verdict.intact
    assert (verdict.broken.seq, verdict.broken.event_id) == (3, events[2])
    assert verdict.broken.problem == "hash mismatch"
    assert verdict.problems == 1


def test_a_timestamp_moved_by_one_microsecond_is_noticed(events):
    alter(
        "UPDATE ledger_effectevent SET created_at = created_at + interval '1 microsecond' "
        "WHERE id = %s",
        events[0],
    )
    broken = seal.verify().broken
    assert (broken.seq, broken.problem) == (1, "hash mismatch")


def test_altered_event_data_is_a_payload_digest_mismatch(events):
    alter(
        'UPDATE ledger_effectevent SET data = \'{"amount": "999.00"}\'::jsonb WHERE id = %s',
        events[1],
    )
    broken = seal.verify().broken
    assert (broken.seq, broken.event_id, broken.problem) == (
        2,
        events[1],
        "payload digest mismatch",
    )


def test_a_deleted_event_is_a_sealed_event_missing(events):
    alter("DELETE FROM ledger_effectevent WHERE id = %s", events[3])
    broken = seal.verify().broken
    assert (broken.seq, broken.event_id, broken.problem) == (4, events[3], "sealed event missing")


def test_an_altered_seal_hash_is_a_hash_mismatch_and_an_altered_link_a_broken_link(events):
    alter("UPDATE ledger_eventseal SET hash = repeat('a', 64) WHERE seq = 2")
    broken = seal.verify().broken
    assert (broken.seq, broken.problem) == (2, "hash mismatch")

    alter("UPDATE ledger_eventseal SET prev_hash = repeat('b', 64) WHERE seq = 1")
    broken = seal.verify().broken
    assert (broken.seq, broken.event_id, broken.problem) == (1, events[0], "broken link")


def test_a_deleted_seal_breaks_the_link_of_the_next_one(events):
    alter("DELETE FROM ledger_eventseal WHERE seq = 3")
    broken = seal.verify().broken
    assert (broken.seq, broken.event_id, broken.problem) == (4, events[3], "broken link")


def test_of_several_broken_links_the_first_is_named(events):
    alter("UPDATE ledger_effectevent SET actor = 'someone' WHERE id = %s", events[4])
    alter("UPDATE ledger_effectevent SET reason = 'edited' WHERE id = %s", events[1])
    verdict = seal.verify()
    assert (verdict.broken.seq, verdict.broken.event_id) == (2, events[1])
    assert verdict.problems == 2


def test_events_unsealed_past_the_grace_are_reported_with_the_oldest(events, make_effect):
    effect = make_effect()
    late = [add_event(effect, "late"), add_event(effect, "late too")]
    add_event(effect, "just now")
    alter(
        "UPDATE ledger_effectevent SET created_at = now() - interval '6 minutes' "
        "WHERE id = ANY(%s)",
        late,
    )
    verdict = seal.verify(grace=300)
    assert verdict.intact
    assert (verdict.unsealed_late, verdict.oldest_unsealed_id) == (2, late[0])


def test_export_head_appends_a_parseable_line_in_a_directory_it_creates(events, head_file):
    first = seal.export_head()
    assert first["hash"] == seal.chain_head().hash
    add_event(EffectEvent.objects.get(id=events[0]).effect, "more")
    seal.seal_pending()
    second = seal.export_head()

    lines = [json.loads(line) for line in head_file.read_text().splitlines()]
    assert lines == [first, second]
    assert (first["seq"], first["event_id"]) == (5, events[-1])
    assert second["seq"] == 6
    assert set(second) == {"seq", "hash", "event_id", "sealed_at", "exported_at"}
    assert seal.last_export() == second


def test_a_chain_rewritten_from_scratch_passes_alone_but_not_against_its_exported_head(
    events, head_file
):
    seal.export_head()
    # Someone edits an event and then rebuilds every seal so that the chain is consistent.
    alter("UPDATE ledger_effectevent SET reason = 'refunded' WHERE id = %s", events[1])
    alter("DELETE FROM ledger_eventseal")
    seal.seal_pending()
    assert seal.verify().intact

    verdict = seal.verify(heads=seal.load_heads(head_file))
    assert not verdict.intact
    assert (verdict.broken.seq, verdict.broken.problem) == (5, "differs from exported head")
    assert verdict.heads_checked == 1


def test_a_chain_cut_short_after_an_export_is_noticed(events, head_file):
    seal.export_head()
    alter("DELETE FROM ledger_eventseal WHERE seq > 3")
    assert seal.verify().intact
    broken = seal.verify(heads=seal.load_heads(head_file)).broken
    assert (broken.seq, broken.problem) == (5, "exported head missing")


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("verifyledger", *args, stdout=out)
    return out.getvalue()


def test_verifyledger_reports_an_intact_chain(events):
    report = _command()
    assert "INTACT" in report
    assert f"seal 5 (event {events[-1]})" in report


def test_verifyledger_names_the_first_broken_link_and_fails_with_status_1(events):
    alter("UPDATE ledger_effectevent SET reason = 'edited' WHERE id = %s", events[2])
    out = io.StringIO()
    with pytest.raises(CommandError) as failure:
        call_command("verifyledger", stdout=out)
    assert failure.value.returncode == 1
    assert f"seal 3 (event {events[2]}): hash mismatch" in str(failure.value)
    assert f"BROKEN at seal 3 (event {events[2]}): hash mismatch" in out.getvalue()


def test_verifyledger_seal_seals_pending_events_before_verifying(make_effect):
    effect = make_effect()
    for n in range(3):
        add_event(effect, f"unsealed {n}")
    report = _command("--seal")
    assert "Sealed 3 pending events." in report
    assert "seal 3" in report


def test_verifyledger_warns_about_events_unsealed_past_the_grace(events, make_effect):
    late = add_event(make_effect(), "late")
    alter(
        "UPDATE ledger_effectevent SET created_at = now() - interval '1 hour' WHERE id = %s", late
    )
    report = _command()
    assert (
        f"WARNING: 1 events unsealed for longer than 300 seconds (oldest: event {late})" in report
    )
    assert "INTACT" in report


def test_verifyledger_checks_a_head_file_and_refuses_a_damaged_one(events, head_file):
    seal.export_head()
    assert "Checked against 1 exported heads" in _command("--heads", str(head_file))

    alter("DELETE FROM ledger_eventseal")
    seal.seal_pending(limit=4)
    with pytest.raises(CommandError, match="seal 5: exported head missing"):
        _command("--heads", str(head_file))

    head_file.write_text("not json\n")
    with pytest.raises(CommandError, match="not an exported chain head"):
        _command("--heads", str(head_file))


@pytest.mark.django_db(transaction=True)
def test_verifyledger_exit_status_is_0_when_intact_and_1_when_broken(make_effect):
    effect = make_effect()
    first = add_event(effect, "one")
    add_event(effect, "two")
    env = {**os.environ, "DATABASE_URL": _url_of_test_database()}

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", "verifyledger", "--seal"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    intact = run()
    assert intact.returncode == 0, intact.stderr
    assert "Sealed 2 pending events." in intact.stdout

    alter("UPDATE ledger_effectevent SET reason = 'edited' WHERE id = %s", first)
    broken = run()
    assert broken.returncode == 1
    assert f"seal 1 (event {first}): hash mismatch" in broken.stderr


def _url_of_test_database() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
