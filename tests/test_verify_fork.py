"""`verifyledger` after a restore: heads exported from the branch the restore left behind
(past a window's `fork_seq`, exported before the window started) are accepted and counted
apart; every other head is checked as before, so a rewritten chain still fails."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger.audit import seal
from ledger.models import RestoreWindow
from tests.factories import add_event, tampering


@pytest.fixture
def forked(make_effect, tmp_path, settings):
    """Five seals exported as heads, then a restore to seal 3: seals 4 and 5 and their events
    are gone, a restore window records the fork at 3, and two new events are sealed as 4 and
    5 with other hashes. Returns the exported heads (those of 4 and 5 from the lost branch)."""
    settings.LEDGER_CHAIN_HEAD_FILE = str(tmp_path / "heads.jsonl")
    effect = make_effect()
    ids = []
    for n in range(1, 6):
        ids.append(add_event(effect, f"step {n}"))
        seal.seal_pending(grace=0)
        seal.export_head()
    with tampering() as cursor:  # what the restore did: the database is back at seal 3
        cursor.execute("DELETE FROM ledger_eventseal WHERE seq > 3")
        cursor.execute("DELETE FROM ledger_effectevent WHERE id = ANY(%s)", [ids[3:]])
    RestoreWindow.objects.create(
        lost_since=timezone.now() - timedelta(minutes=5),
        source="manual",
        started_by="admin",
        reason="restored from backup",
        fork_seq=3,
    )
    for n in (6, 7):
        add_event(effect, f"after the restore {n}")
    seal.seal_pending(grace=0)
    return seal.load_heads(seal.head_file())


def test_lost_branch_heads_are_accepted_and_counted_apart(forked):
    verdict = seal.verify(heads=forked)
    assert verdict.intact, verdict.broken
    assert verdict.lost_branch_heads == 2
    assert verdict.heads_checked == 3
    assert verdict.head.seq == 5


def test_without_the_window_the_same_heads_fail(forked):
    RestoreWindow.objects.all().delete()
    verdict = seal.verify(heads=forked)
    assert not verdict.intact
    assert (verdict.broken.seq, verdict.broken.problem) == (4, "differs from exported head")
    assert verdict.lost_branch_heads == 0


def test_the_shared_prefix_is_still_checked(forked):
    wrong = [dict(h, hash="f" * 64) if h["seq"] == 2 else h for h in forked]
    verdict = seal.verify(heads=wrong)
    assert not verdict.intact
    assert (verdict.broken.seq, verdict.broken.problem) == (2, "differs from exported head")
    assert verdict.lost_branch_heads == 2


def test_a_head_past_the_fork_exported_after_the_restore_is_checked(forked):
    later = (timezone.now() + timedelta(minutes=1)).isoformat()
    rewritten = {"seq": 5, "hash": "e" * 64, "exported_at": later}
    verdict = seal.verify(heads=[*forked, rewritten])
    assert not verdict.intact
    assert (verdict.broken.seq, verdict.broken.problem) == (5, "differs from exported head")
    assert verdict.lost_branch_heads == 2


def test_a_head_without_an_export_time_is_checked(forked):
    bare = [{"seq": h["seq"], "hash": h["hash"]} for h in forked]
    verdict = seal.verify(heads=bare)
    assert not verdict.intact
    assert verdict.lost_branch_heads == 0


def test_a_window_accepts_nothing_before_its_fork(forked):
    RestoreWindow.objects.update(fork_seq=4)
    verdict = seal.verify(heads=forked)
    assert not verdict.intact
    assert verdict.broken.seq == 4
    assert verdict.lost_branch_heads == 1


def test_the_command_reports_the_lost_branch_and_passes(forked, tmp_path):
    out = io.StringIO()
    call_command("verifyledger", heads=seal.head_file(), stdout=out)
    assert "2 exported heads belong to the branch a restore left behind" in out.getvalue()
    assert "INTACT" in out.getvalue()
    # A head of the lost branch exported after the window began is not accepted.
    with seal.head_file().open("a") as heads:
        late = (timezone.now() + timedelta(minutes=1)).isoformat()
        heads.write(json.dumps({"seq": 4, "hash": "d" * 64, "exported_at": late}) + "\n")
    with pytest.raises(CommandError, match="broken at seal 4"):
        call_command("verifyledger", heads=seal.head_file(), stdout=io.StringIO())
