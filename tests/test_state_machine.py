"""Every (from, to) pair of states, through the transition function and against the trigger;
the table of docs/concepts.md#transitions, which calls itself complete, against the code's."""

from __future__ import annotations

import itertools
import re

import pytest
from django.db import DatabaseError, connection, transaction

from ledger.effects.transitions import transition
from ledger.errors import InvalidTransition
from ledger.models import Effect, EffectEvent
from ledger.models.states import TRANSITIONS, Status
from tests.helpers import ROOT

ALL_PAIRS = list(itertools.product(Status, Status))
ALLOWED = sorted(TRANSITIONS)
REFUSED = [pair for pair in ALL_PAIRS if pair not in TRANSITIONS]
# A raw UPDATE that keeps the status is not a transition; the trigger lets it through.
REFUSED_CHANGES = [(a, b) for a, b in REFUSED if a != b]
# A row of the concepts page's transitions table: | `from` | `to` | when |
_DOCUMENTED_ROW = re.compile(r"^\| `(\w+)` \| `(\w+)` \|")


def test_the_table_has_the_transitions_the_design_names():
    assert len(ALLOWED) == 18
    assert (Status.PLANNED, Status.DISPATCHING) in TRANSITIONS
    # Four-eyes: approved or rejected, never claimed straight from awaiting_approval.
    assert (Status.AWAITING_APPROVAL, Status.PLANNED) in TRANSITIONS
    assert (Status.AWAITING_APPROVAL, Status.CANCELLED) in TRANSITIONS
    assert (Status.AWAITING_APPROVAL, Status.DISPATCHING) not in TRANSITIONS
    assert (Status.CONFIRMED, Status.COMPENSATED) in TRANSITIONS
    assert (Status.FAILED, Status.PLANNED) not in TRANSITIONS
    assert (Status.CONFIRMED, Status.FAILED) not in TRANSITIONS
    # Restore mode: what may have moved in a lost window is put in doubt, from before a claim
    # (planned, awaiting approval) as from after one; nothing finished is.
    assert (Status.PLANNED, Status.UNKNOWN) in TRANSITIONS
    assert (Status.AWAITING_APPROVAL, Status.UNKNOWN) in TRANSITIONS
    assert (Status.CANCELLED, Status.UNKNOWN) not in TRANSITIONS


@pytest.mark.parametrize(("source", "target"), ALLOWED, ids=lambda s: str(s))
def test_an_allowed_transition_moves_the_effect_and_writes_one_event(make_effect, source, target):
    effect = make_effect(source)
    moved = transition(effect, target, actor="test", reason="because")
    stored = Effect.objects.get(pk=effect.pk)
    assert stored.status == target
    assert stored.version == effect.version + 1
    assert moved.status == target
    events = list(EffectEvent.objects.filter(effect=effect))
    assert [(e.from_status, e.to_status, e.reason) for e in events] == [(source, target, "because")]


@pytest.mark.parametrize(("source", "target"), REFUSED, ids=lambda s: str(s))
def test_a_refused_transition_changes_nothing_and_writes_no_event(make_effect, source, target):
    effect = make_effect(source)
    with pytest.raises(InvalidTransition) as refusal:
        transition(effect, target, actor="test")
    assert refusal.value.status == 409
    stored = Effect.objects.get(pk=effect.pk)
    assert (stored.status, stored.version) == (source, effect.version)
    assert not EffectEvent.objects.filter(effect=effect).exists()


def test_leaving_dispatching_clears_the_lease(make_effect):
    effect = make_effect("dispatching")
    moved = transition(effect, Status.UNKNOWN, actor="test")
    assert (moved.lease_token, moved.claim_id, moved.lease_expires_at) == (None, None, None)
    assert moved.resolved_at is None


def test_resolving_states_stamp_resolved_at_from_the_database_clock(make_effect):
    effect = make_effect("dispatching")
    moved = transition(effect, Status.CONFIRMED, actor="test")
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    assert moved.resolved_at == now  # the same transaction: now() is the transaction's time


def test_a_writer_holding_an_old_version_loses(make_effect):
    effect = make_effect("dispatching")
    stale_copy = Effect.objects.get(pk=effect.pk)
    transition(effect, Status.CONFIRMED, actor="first")
    from ledger.effects.transitions import Superseded

    with pytest.raises(Superseded):
        transition(stale_copy, Status.FAILED, actor="second")
    assert Effect.objects.get(pk=effect.pk).status == Status.CONFIRMED
    assert EffectEvent.objects.filter(effect=effect).count() == 1


def _trigger_pairs() -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.prosrc FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE t.tgrelid = 'ledger_effect'::regclass AND NOT t.tgisinternal"
        )
        sources = [row[0] for row in cursor.fetchall()]
    (fsm,) = [s for s in sources if "Invalid transition" in s]
    array = re.search(r"ANY\('\{([^}]*)\}'::text\[\]\)", fsm).group(1)
    return {tuple(item.split(":")) for item in array.split(",")}


def test_the_database_trigger_allows_exactly_the_python_table(db):
    assert _trigger_pairs() == {(str(a), str(b)) for a, b in TRANSITIONS}


@pytest.mark.parametrize(("source", "target"), REFUSED_CHANGES, ids=lambda s: str(s))
def test_the_trigger_refuses_a_raw_update_the_table_forbids(make_effect, source, target):
    effect = make_effect(source)
    with (
        pytest.raises(DatabaseError, match="Invalid transition"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE ledger_effect SET status = %s WHERE id = %s", [target, effect.id])
    assert Effect.objects.get(pk=effect.pk).status == source


@pytest.mark.parametrize(("source", "target"), ALLOWED, ids=lambda s: str(s))
def test_the_trigger_lets_an_allowed_raw_update_through(make_effect, source, target):
    effect = make_effect(source)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_effect SET status = %s WHERE id = %s", [target, effect.id])
    assert Effect.objects.get(pk=effect.pk).status == target


def _documented_pairs() -> list[tuple[str, str]]:
    """The (from, to) rows of the table under "### Transitions" in docs/concepts.md."""
    text = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = text.split("\n### Transitions\n", 1)[1].split("\n#", 1)[0]
    return [m.groups() for line in section.splitlines() if (m := _DOCUMENTED_ROW.match(line))]


def test_the_concepts_page_lists_exactly_the_allowed_transitions():
    documented = _documented_pairs()
    allowed = {(str(a), str(b)) for a, b in TRANSITIONS}
    assert len(documented) == len(set(documented)), "a pair is listed twice"
    assert set(documented) - allowed == set(), "listed in the docs, refused by the code"
    assert allowed - set(documented) == set(), "allowed by the code, missing from the docs"
