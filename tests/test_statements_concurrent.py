"""Two imports of one tool's statements at the same moment give exactly what the same two give
one after the other: imports of a tool are staged and applied one at a time, so neither loses
a move to the other and no line is left unlooked at. Real threads, each with its own database
connection, started together at a barrier, several times over."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection

from ledger.models import Effect, ReviewItem, StatementImport
from ledger.statements import apply as applying
from tests.test_statements_support import day, db_now, dispatched, line, load_tools, run_import

EFFECTS = 60
RUNS = 5

Picture = list[tuple[str, tuple[str, ...]]]


def _effects(make_effect, period) -> list[Effect]:
    """`EFFECTS` charges whose answer was lost, claimed in `period`."""
    claim = period[0] + timedelta(hours=9)
    return [
        dispatched(make_effect, [(claim, claim + timedelta(minutes=1))]) for _ in range(EFFECTS)
    ]


def _statements(effects: list[Effect], first, second) -> tuple[list[dict], list[dict]]:
    """The provider's day `first`: each charge succeeded; its day `second`: the same charges
    (same provider refs) declined. One after the other: first then second, each is confirmed
    (the decline agrees with the success); second then first, each is failed and then
    contradicted by the success, a review each. At once, unserialised, the first's confirm can
    be decided on an effect the second is failing at that moment and lost: failed, with no
    review, which neither order gives."""
    succeeded = [
        line(e, first[0] + timedelta(hours=10), provider_ref=f"ch_{e.pk}") for e in effects
    ]
    declined = [
        line(e, second[0] + timedelta(hours=10), provider_ref=f"ch_{e.pk}", status="failed")
        for e in effects
    ]
    return succeeded, declined


def _picture(effects: list[Effect]) -> Picture:
    """Each effect's status and open review reasons, in the effects' order."""
    open_items: dict[object, list[str]] = {}
    for effect_id, reason in ReviewItem.objects.filter(
        effect__in=effects, resolved_at__isnull=True
    ).values_list("effect_id", "reason"):
        open_items.setdefault(effect_id, []).append(reason)
    statuses = dict(
        Effect.objects.filter(pk__in=[e.pk for e in effects]).values_list("pk", "status")
    )
    return [(statuses[e.pk], tuple(sorted(open_items.get(e.pk, [])))) for e in effects]


def _together(first: tuple, second: tuple) -> None:
    """Run both imports at once, each in a thread with its own connection."""
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def run(period, rows) -> None:
        try:
            barrier.wait(10)
            run_import(period, rows)
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=args) for args in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads), "an import never finished"
    assert not failures, failures


@pytest.mark.django_db(transaction=True)
def test_two_imports_of_one_tool_at_once_give_what_one_after_the_other_gives(tmp_path, make_effect):
    load_tools(tmp_path)
    now = db_now()
    days = iter(range(2 * (RUNS + 2) + 1, 0, -1))  # a period of its own for every import

    def case() -> tuple[list[Effect], tuple, tuple]:
        first, second = day(now, next(days)), day(now, next(days))
        effects = _effects(make_effect, first)
        succeeded, declined = _statements(effects, first, second)
        return effects, (first, succeeded), (second, declined)

    effects, a, b = case()
    run_import(*a)
    run_import(*b)
    a_then_b = _picture(effects)
    effects, a, b = case()
    run_import(*b)
    run_import(*a)
    b_then_a = _picture(effects)
    contradicts = ("statement_contradicts_record",)
    assert a_then_b == [("confirmed", ())] * EFFECTS
    assert b_then_a == [("failed", contradicts)] * EFFECTS

    for attempt in range(RUNS):
        effects, a, b = case()
        _together(a, b)
        got = _picture(effects)
        assert got in (a_then_b, b_then_a), (attempt, sorted(set(got)))
    assert set(StatementImport.objects.values_list("phase", flat=True)) == {"done"}


def test_an_import_finishes_an_unfinished_import_of_its_tool_before_its_own(
    tmp_path, make_effect, monkeypatch
):
    load_tools(tmp_path)
    now = db_now()
    first, second = day(now, 3), day(now, 2)
    effects = _effects(make_effect, first)
    succeeded, declined = _statements(effects, first, second)
    monkeypatch.setattr(applying, "BATCH", 20)
    real = applying.verdicts.verdict_on
    calls = {"n": 0}

    def crash_in_the_second_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 21:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(applying.verdicts, "verdict_on", crash_in_the_second_batch)
    with pytest.raises(RuntimeError):
        run_import(first, succeeded)
    monkeypatch.setattr(applying.verdicts, "verdict_on", real)
    crashed = StatementImport.objects.get()
    assert (crashed.phase, crashed.confirmed) == ("lines", 20)

    run_import(second, declined)

    # As if the first had finished before the second began: every charge confirmed, the
    # declines agreeing with it, nothing for a person.
    assert _picture(effects) == [("confirmed", ())] * EFFECTS
    assert list(StatementImport.objects.order_by("pk").values_list("phase", "confirmed")) == [
        ("done", EFFECTS),
        ("done", 0),
    ]
