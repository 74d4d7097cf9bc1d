"""Final statements prove absence for effects restore mode put in doubt, or that started in
doubt, over the window a copy of them on the lost branch could have been sent in: from the
restore window's lost_since less the longest lease to its start plus the longest lease (and
settle_after and the skew at both ends). Only where lines name effects by idempotency key."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from ledger.models import Effect, RestoreWindow
from tests.test_statements_support import add_event, day, db_now, dispatched, load_tools, run_import

SKEW, SETTLE, LEASE = timedelta(minutes=5), timedelta(minutes=2), timedelta(hours=1)


@pytest.fixture
def restored(db, tmp_path):
    """A restore window two days ago: lost since 10:00, begun 10:30, ended at noon."""
    load_tools(tmp_path)
    period = day(db_now(), 2)
    lost_since = period[0] + timedelta(hours=10)
    window = RestoreWindow.objects.create(
        lost_since=lost_since, started_at=lost_since + timedelta(minutes=30),
        ended_at=period[0] + timedelta(hours=12), source="manual", started_by="shell:t",
        reason="PITR", fork_seq=0,
    )  # fmt: skip
    return SimpleNamespace(
        period=period,
        window=window,
        lost_from=lost_since - LEASE - SKEW,
        lost_until=window.started_at + LEASE + SETTLE + SKEW,
    )


def started_in_doubt(make_effect, restored, *, tool: str = "stmt_pay", minutes: int = 10):
    """An intent recorded `unknown` `minutes` after the window began (or before, if negative)."""
    effect = make_effect(
        "unknown", tool=tool, request={"amount": "12.50", "currency": "EUR"}, attempt=0
    )
    add_event(effect, restored.window.started_at + timedelta(minutes=minutes), kind="intent",
              to="unknown", reason="intent")  # fmt: skip
    return effect


def status(effect: Effect) -> str:
    return Effect.objects.get(pk=effect.pk).status


def test_an_intent_that_started_in_doubt_is_proven_absent_over_the_lost_window(
    make_effect, restored
):
    effect = started_in_doubt(make_effect, restored)
    # Every moment but the last second of the window: not enough.
    run_import((restored.period[0], restored.lost_until - timedelta(seconds=1)), [])
    assert status(effect) == "unknown"
    run_import((restored.lost_until - timedelta(seconds=1), restored.period[1]), [])
    assert status(effect) == "planned"


def test_the_window_reaches_back_to_lost_since_less_the_longest_lease_and_the_skew(
    make_effect, restored
):
    effect = started_in_doubt(make_effect, restored)
    run_import((restored.lost_from + timedelta(seconds=1), restored.period[1]), [])
    assert status(effect) == "unknown"
    run_import((restored.period[0], restored.lost_from + timedelta(seconds=1)), [])
    assert status(effect) == "planned"


def test_an_intent_unknown_outside_any_restore_window_has_no_window(make_effect, restored):
    before = started_in_doubt(make_effect, restored, minutes=-1)
    run_import(restored.period, [])
    assert status(before) == "unknown"


def test_an_effect_put_in_doubt_needs_its_dispatches_and_the_lost_window_covered(
    make_effect, restored
):
    claim = restored.window.lost_since - timedelta(minutes=20)
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    add_event(effect, restored.window.started_at, frm="unknown", to="unknown",
              reason="restored_gap")  # fmt: skip
    # Its dispatch (9:40 to 9:41, + settle and skew) lies inside; the lost window does not.
    run_import((restored.period[0], restored.window.started_at), [])
    assert status(effect) == "unknown"
    run_import((restored.window.started_at, restored.period[1]), [])
    assert status(effect) == "planned"


def test_without_the_idempotency_key_as_reference_no_absence_is_proven_for_them(
    make_effect, restored
):
    """A copy sent on the lost branch had another effect id: a statement naming effects by id
    cannot show it, so its absence from the statement proves nothing."""
    doubted = started_in_doubt(make_effect, restored, tool="stmt_minor")
    claim = restored.period[0] + timedelta(hours=3)
    plain = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))], tool="stmt_minor",
                       request={"amount": 1250, "currency": "EUR"})  # fmt: skip
    run_import(restored.period, [], tool="stmt_minor",
               content=b"id,ref,amount,currency,state,occurred_at\n")  # fmt: skip
    assert status(plain) == "planned"
    assert status(doubted) == "unknown"
