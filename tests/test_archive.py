"""`manage.py archive --before YYYY-MM`: months are exported, checked against the chain and
dropped, a checkpoint records the cut, and `verifyledger` starts there and still catches any
change to what remains; a month that is not ready is refused with a sentence."""

from __future__ import annotations

import io
import json
from datetime import date, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from ledger.audit import archive, partitions, seal
from ledger.models.audit import ArchivedMonth
from ledger.policy import digests
from tests.factories import tampering

AUGUST, SEPTEMBER = date(2026, 8, 1), date(2026, 9, 1)


def insert(effect, when: str, n: int = 0) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (kind, actor, from_status, to_status, reason, data, "
            "digest, created_at, effect_id) VALUES ('transition', 'test', 'planned', "
            "'confirmed', %s, %s, %s, %s::timestamptz, %s) RETURNING id",
            [f"at {when}", f'{{"n": {n}}}', digests.content_digest({"n": n}), when, effect.id],
        )
        return cursor.fetchone()[0]


@pytest.fixture
def history(make_effect, settings, tmp_path) -> dict:
    """Events in August, September and this month, sealed. One August event commits (and is
    sealed) after September's first: it lies past the sealed boundary."""
    settings.LEDGER_ARCHIVE_DIR = str(tmp_path / "archive")
    for month in (AUGUST, SEPTEMBER):
        partitions.create_month(month)
    old = make_effect(status="confirmed", resolved_at=timezone.now() - timedelta(days=90))
    ids = {"aug": [insert(old, f"2026-08-{d:02d}", d) for d in (1, 15, 31)]}
    ids["sep"] = [insert(old, "2026-09-01 00:00:01", 1)]
    seal.seal_pending(grace=0)
    ids["aug_late"] = insert(old, "2026-08-31 23:59:59.9", 9)
    ids["sep"] += [insert(old, "2026-09-20", 2)]
    seal.seal_pending(grace=0)
    ids["now"] = [insert(old, timezone.now().isoformat(), 5)]
    seal.seal_pending(grace=0)
    return ids


def run(before: str, **options) -> str:
    out = io.StringIO()
    call_command("archive", before=before, stdout=out, **options)
    return out.getvalue()


def remaining() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM ledger_effectevent")
        return {i for (i,) in cursor.fetchall()}


@pytest.mark.django_db
def test_months_are_exported_checked_dropped_and_verification_starts_at_the_cut(history, settings):
    out = run("2026-09")
    assert "Archived 2026-08: 4 events exported" in out
    assert "(1 of its seals past the cut)" in out
    assert partitions.partition_of(AUGUST) is None
    assert remaining() == set(history["sep"] + history["now"])
    checkpoint = ArchivedMonth.objects.get()
    # Seals 1-3 are August's; 4 is September's first; 5 is the late August event.
    assert (checkpoint.cut_seq, checkpoint.beyond_cut, checkpoint.events) == (3, [[5, 5]], 4)
    folder = Path(settings.LEDGER_ARCHIVE_DIR) / "2026-08"
    lines = (folder / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == history["aug"] + [history["aug_late"]]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["cut"] == {"seq": 3, "hash": checkpoint.cut_hash, "beyond": [[5, 5]]}
    assert (folder / "events.csv").read_text().count("\n") == 5

    verdict = seal.verify()
    assert verdict.intact, verdict.broken
    assert (verdict.start, verdict.archived, verdict.count) == (3, 1, 4)

    assert "Archived 2026-09: 2 events" in run("2026-10")
    verdict = seal.verify()
    assert verdict.intact and verdict.start == 6 and verdict.count == 1
    assert "No month before 2026-10 is left to archive." in run("2026-10")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE ledger_effectevent SET reason = 'nothing' WHERE id = {sep}",
        "DELETE FROM ledger_effectevent WHERE id = {sep}",
        "UPDATE ledger_eventseal SET hash = repeat('0', 64) WHERE seq = 3",
    ],
)
def test_after_archiving_a_change_to_what_remains_is_caught(history, tamper):
    run("2026-09")
    with tampering() as cursor:
        cursor.execute(tamper.format(sep=history["sep"][1]))
    verdict = seal.verify()
    assert not verdict.intact


@pytest.mark.django_db
def test_a_month_with_effects_not_yet_terminal_is_refused(history, make_effect):
    insert(make_effect(status="dispatched"), "2026-08-10")
    seal.seal_pending(grace=0)
    with pytest.raises(CommandError, match="2026-08 holds events of 1 effects that are not yet"):
        run("2026-09")
    assert partitions.partition_of(AUGUST) is not None
    assert not ArchivedMonth.objects.exists()


@pytest.mark.django_db
def test_a_month_not_sealed_is_refused(history, make_effect):
    insert(
        make_effect(status="confirmed", resolved_at=timezone.now() - timedelta(days=90)),
        "2026-08-11",
    )
    with pytest.raises(CommandError, match="2026-08 is not sealed: 1 of its events"):
        run("2026-09")
    assert partitions.partition_of(AUGUST) is not None


@pytest.mark.django_db
def test_a_month_inside_the_retention_period_is_refused(history, settings, make_effect):
    settings.LEDGER_RETENTION = 120 * 86400
    with pytest.raises(CommandError, match="2026-08 is still inside the retention period"):
        run("2026-09")
    settings.LEDGER_RETENTION = 30 * 86400
    late = make_effect(status="confirmed", resolved_at=timezone.now() - timedelta(days=2))
    insert(late, "2026-08-12")
    seal.seal_pending(grace=0)
    with pytest.raises(CommandError, match="1 of its effects were resolved less than 30 days"):
        run("2026-09")
    assert partitions.partition_of(AUGUST) is not None


@pytest.mark.django_db
def test_an_export_that_does_not_match_the_chain_is_refused_and_nothing_dropped(history, tmp_path):
    part = partitions.partition_of(AUGUST)
    events, files = archive.export(part, tmp_path)
    assert events == 4
    archive.verify_export(part, tmp_path, files)
    with tampering() as cursor:  # the chain now says otherwise about one of them
        cursor.execute("UPDATE ledger_eventseal SET hash = repeat('a', 64) WHERE seq = 2")
    with pytest.raises(archive.Refused, match="does not match the chain at line 2"):
        archive.verify_export(part, tmp_path, files)
    (tmp_path / "events.csv").write_text("changed")
    with pytest.raises(archive.Refused, match="changed on disk"):
        archive.verify_export(part, tmp_path, files)
    assert partitions.partition_of(AUGUST) is not None


@pytest.mark.django_db
def test_an_export_directory_holding_something_is_refused(history, settings):
    folder = Path(settings.LEDGER_ARCHIVE_DIR) / "2026-08"
    folder.mkdir(parents=True)
    (folder / "events.csv").write_text("earlier")
    with pytest.raises(CommandError, match="holds an export already"):
        run("2026-09")


@pytest.mark.django_db
@pytest.mark.parametrize("before", ["2026-13", "September", "2026-9", ""])
def test_a_month_not_written_yyyy_mm_is_refused(before):
    with pytest.raises(CommandError, match="is not a month written YYYY-MM"):
        run(before)


@pytest.mark.django_db
def test_a_month_sealed_after_later_ones_is_listed_past_the_cut_as_ranges(make_effect, tmp_path):
    """A backfilled month: all of its events were sealed after this month's first ones."""
    partitions.create_month(AUGUST)
    old = make_effect(status="confirmed", resolved_at=timezone.now() - timedelta(days=90))
    current = [insert(old, timezone.now().isoformat(), n) for n in range(2)]
    seal.seal_pending(grace=0)
    august = [insert(old, f"2026-08-{d:02d}", d) for d in (2, 3, 4)]
    later = insert(old, timezone.now().isoformat(), 7)
    seal.seal_pending(grace=0)

    assert "Archived 2026-08: 3 events" in run("2026-09", to=tmp_path)
    checkpoint = ArchivedMonth.objects.get()
    assert (checkpoint.cut_seq, checkpoint.beyond_cut) == (0, [[3, 5]])
    verdict = seal.verify()
    assert verdict.intact, verdict.broken
    assert (verdict.archived, verdict.count) == (3, 6)
    assert remaining() == {*current, later}
    assert not set(august) & remaining()
    # Deleting a remaining event is still caught, past the cut as before it.
    with tampering() as cursor:
        cursor.execute("DELETE FROM ledger_effectevent WHERE id = %s", [later])
    assert seal.verify().broken.problem == "sealed event missing"


@pytest.mark.django_db
def test_a_month_archived_already_whose_partition_is_back_is_refused(history, make_effect):
    run("2026-09")
    partitions.create_month(AUGUST)
    insert(
        make_effect(status="confirmed", resolved_at=timezone.now() - timedelta(days=90)),
        "2026-08-20",
    )
    seal.seal_pending(grace=0)
    with pytest.raises(CommandError, match="2026-08 was archived already"):
        run("2026-09")
