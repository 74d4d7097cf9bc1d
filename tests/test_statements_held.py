"""Statement lines held because their effect could not move (a live lease), looked at again
once it can (`ledger.statements.held`, the schedule `statement-held-lines`): the line confirms
the effect, or fails it, with a statement event naming its statement; an effect that still
cannot move, or whose verdict moves nothing, is left as it is and nothing is recorded."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from ledger.models import Effect, EffectEvent, StatementLine
from ledger.statements.held import revisit
from tests.test_statements_support import day, db_now, dispatched, line, load_tools, run_import


@pytest.fixture
def setup(db, tmp_path, make_effect):
    load_tools(tmp_path)
    now = db_now()
    period = day(now, 2)
    return SimpleNamespace(now=now, period=period, claim=period[0] + timedelta(hours=10))


def _held(setup, make_effect, **values):
    """An effect dispatching under a live lease when its statement's line came in."""
    effect = dispatched(
        make_effect, [(setup.claim, None)], status="dispatching",
        lease_expires_at=setup.now + timedelta(minutes=5),
    )  # fmt: skip
    made = run_import(setup.period, [line(effect, setup.claim, **values)])
    assert Effect.objects.get(pk=effect.pk).status == "dispatching"
    assert StatementLine.objects.get(effect=effect).outcome == "held"
    return effect, made


def _lease_runs_out(effect: Effect, status: str = "unknown") -> None:
    Effect.objects.filter(pk=effect.pk).update(
        status=status, lease_expires_at=db_now() - timedelta(seconds=1)
    )


def test_a_held_line_confirms_its_effect_once_the_lease_ran_out(setup, make_effect):
    effect, made = _held(setup, make_effect)
    assert revisit() == {}  # the lease still runs: nothing to look at again

    _lease_runs_out(effect)
    assert revisit() == {"confirmed": 1}

    effect = Effect.objects.get(pk=effect.pk)
    held_line = StatementLine.objects.get(effect=effect)
    assert (effect.status, effect.provider_ref) == ("confirmed", held_line.provider_ref)
    assert held_line.outcome == "confirmed"
    [event] = EffectEvent.objects.filter(effect=effect, kind="statement", reason="confirm")
    assert event.data["statement"] == made.pk
    assert revisit() == {}  # done: nothing held any more


def test_a_dispatching_effect_past_its_lease_moves_too(setup, make_effect):
    effect, _ = _held(setup, make_effect)
    _lease_runs_out(effect, status="dispatching")
    assert revisit() == {"confirmed": 1}
    assert Effect.objects.get(pk=effect.pk).status == "confirmed"


def test_a_failed_line_fails_its_effect(setup, make_effect):
    effect, _ = _held(setup, make_effect, status="failed")
    _lease_runs_out(effect)
    assert revisit() == {"failed": 1}
    assert Effect.objects.get(pk=effect.pk).status == "failed"


def test_a_verdict_that_moves_nothing_records_nothing(setup, make_effect):
    effect, _ = _held(setup, make_effect, status="pending")
    _lease_runs_out(effect)
    before = EffectEvent.objects.filter(effect=effect).count()
    assert revisit() == {} and revisit() == {}
    assert Effect.objects.get(pk=effect.pk).status == "unknown"
    assert EffectEvent.objects.filter(effect=effect).count() == before
    assert StatementLine.objects.get(effect=effect).outcome == "held"
