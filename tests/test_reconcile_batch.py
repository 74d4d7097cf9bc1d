"""The checker's set-based path: a batch's common answers written together by
`ledger.effects.transitions.transition_many`, each effect whole or not at all.

Found-and-matching and settled not-found answers are one transition each; the batch writes
them in one statement per kind of move, with their reconciliation events. These tests pin what
must not change with that: an effect someone else moved meanwhile gets nothing (no stray
reconciliation event, no count), the others everything; events keep their order; amounts are
released on proof of non-receipt; follow-ons still run; and a bigger batch costs no more
statements than a small one.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.effects.transitions import Move, transition, transition_many
from ledger.errors import InvalidTransition
from ledger.models import AmountCharge, Effect, EffectEvent, Tool
from ledger.models.states import Status
from ledger.observability.metrics import declared_tools
from ledger.policy import agentkeys, configversion
from reconcilers.reconcile import ACTOR, check, process_many, take
from tests import test_metrics
from tests.factories import SETTLED, charge_at, checks_of, lost, stored
from tests.helpers import events_of
from tests.test_metrics import value

# /metrics scraped as tests/test_metrics.py does it (its fixture, shared by name).
scrape = test_metrics.scrape


def trail(effect: dict) -> list[tuple[str, str, str, str]]:
    """The effect's events after its claim, in order: (kind, actor, to_status, reason)."""
    return [(e.kind, e.actor, e.to_status, e.reason) for e in events_of(effect["id"])[2:]]


def test_a_batch_records_nothing_for_an_effect_moved_meanwhile_and_everything_for_the_rest(
    alice,
    provider,
    scrape,
    django_capture_on_commit_callbacks,
):
    found, moved, never = (
        lost(alice, step, seconds_ago=SETTLED) for step in ("found", "moved", "never")
    )
    charge = charge_at(provider, found).json()
    charge_at(provider, moved)
    samples = scrape()
    counts = {
        ("ledger_reconciliations_total", "found"): value(
            samples, "ledger_reconciliations_total", tool="charge_card", outcome="found"
        ),
        ("ledger_reconciliations_total", "not_found"): value(
            samples, "ledger_reconciliations_total", tool="charge_card", outcome="not_found"
        ),
        ("ledger_transitions_total", "confirmed"): value(
            samples, "ledger_transitions_total", from_status="dispatching", to_status="confirmed"
        ),
    }
    taken = take([found["id"], moved["id"], never["id"]])
    assert len(taken) == 3
    # Between the take and the write, someone else moves one of them.
    transition(stored(moved), Status.UNKNOWN, actor="test", reason="lease_expired")

    with django_capture_on_commit_callbacks(execute=True):
        check(taken)

    assert (stored(found).status, stored(found).provider_ref) == ("confirmed", charge["id"])
    assert trail(found) == [
        ("reconciliation", ACTOR, "dispatching", "found"),
        ("transition", ACTOR, "confirmed", "found_at_provider"),
    ]
    assert stored(never).status == "planned"
    assert trail(never) == [
        ("reconciliation", ACTOR, "dispatching", "not_found"),
        ("transition", ACTOR, "planned", "never_received"),
    ]
    # The one that moved keeps only what its mover wrote.
    assert stored(moved).status == "unknown"
    assert trail(moved) == [("transition", "test", "unknown", "lease_expired")]
    assert checks_of(moved) == []
    samples = scrape()
    assert (
        value(samples, "ledger_reconciliations_total", tool="charge_card", outcome="found")
        - counts[("ledger_reconciliations_total", "found")]
        == 1
    )
    assert (
        value(samples, "ledger_reconciliations_total", tool="charge_card", outcome="not_found")
        - counts[("ledger_reconciliations_total", "not_found")]
        == 1
    )
    assert (
        value(samples, "ledger_transitions_total", from_status="dispatching", to_status="confirmed")
        - counts[("ledger_transitions_total", "confirmed")]
        == 1
    )


def test_the_moves_carry_what_the_single_path_wrote(alice, provider):
    found = lost(alice, "found", seconds_ago=SETTLED)
    charge_at(provider, found)
    never = lost(alice, "never", seconds_ago=SETTLED)

    assert process_many([found["id"], never["id"]]) == 2

    confirmed, planned = stored(found), stored(never)
    # Leaving dispatching clears the lease; entering confirmed resolves the effect.
    for effect in (confirmed, planned):
        assert (effect.lease_token, effect.claim_id, effect.lease_expires_at) == (None, None, None)
        assert effect.left_dispatch_at is not None
        assert effect.next_check_at is None
    assert confirmed.resolved_at is not None and confirmed.response["status"] == "succeeded"
    assert planned.resolved_at is None and planned.checks == 0
    [check_event, move_event] = events_of(found["id"])[2:]
    # The move repeats the answer; the provider's record itself is kept once, on the check.
    assert move_event.data["lookup"] == {k: v for k, v in check_event.data.items() if k != "record"}
    assert check_event.data["record"]["id"] == confirmed.provider_ref
    assert move_event.digest and move_event.digest != check_event.digest


def test_a_batch_of_proofs_of_non_receipt_releases_every_amount(alice, provider):
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", limit_amount_per_day={"EUR": "100.00"}
    )
    request = {"amount": "10.00", "currency": "EUR"}
    effects = [lost(alice, step, seconds_ago=SETTLED, request=request) for step in ("a", "b", "c")]
    kept = charge_at(provider, effects[2])
    assert kept.status_code == 201
    assert AmountCharge.objects.filter(effect_id__in=[e["id"] for e in effects]).count() == 3

    assert process_many([e["id"] for e in effects]) == 3

    remaining = AmountCharge.objects.filter(effect_id__in=[e["id"] for e in effects])
    assert [str(c.effect_id) for c in remaining] == [effects[2]["id"]]  # it did arrive


def test_a_bigger_batch_costs_no_more_statements(alice, provider, monkeypatch):
    # What the process reads once and keeps (the configuration version, the declared tools'
    # names for the metrics' labels) depends on the clock and on what ran before, not on the
    # batch: read here first, and held still for the two batches.
    monkeypatch.setattr(configversion, "STALE_AFTER", 120.0)
    monkeypatch.setattr(agentkeys, "RECHECK_SECONDS", 120.0)
    declared_tools()

    def statements(count: int, prefix: str) -> int:
        effects = [lost(alice, f"{prefix}-{n}", seconds_ago=SETTLED) for n in range(count)]
        for effect in effects[::2]:
            charge_at(provider, effect)
        with CaptureQueriesContext(connection) as queries:
            assert process_many([e["id"] for e in effects]) == count
        return len(queries)

    assert statements(8, "big") == statements(2, "small")


def test_a_move_to_failed_cancels_the_planned_dependents(alice):
    upstream = alice.intent(step_id="pay", claim=True)
    downstream = alice.intent(step_id="ship", depends_on=[upstream["id"]])

    moved = transition_many(
        [Move(stored(upstream), Status.FAILED, reason="never_sent")], actor="test"
    )

    assert moved == {stored(upstream).id}
    assert stored(downstream).status == "cancelled"


def test_a_move_that_is_not_allowed_writes_nothing(alice):
    first = alice.intent(step_id="a", claim=True)
    second = alice.intent(step_id="b")
    events = EffectEvent.objects.count()

    with pytest.raises(InvalidTransition):
        transition_many(
            [
                Move(stored(first), Status.CONFIRMED, reason="found_at_provider"),
                Move(stored(second), Status.CONFIRMED, reason="found_at_provider"),
            ],
            actor="test",
        )

    assert [stored(first).status, stored(second).status] == ["dispatching", "planned"]
    assert EffectEvent.objects.count() == events


def test_an_effect_moves_at_most_once_per_call(alice):
    effect = stored(alice.intent(step_id="a", claim=True))

    with pytest.raises(ValueError):
        transition_many(
            [Move(effect, Status.UNKNOWN), Move(effect, Status.CONFIRMED)], actor="test"
        )

    assert Effect.objects.get(pk=effect.pk).status == "dispatching"
