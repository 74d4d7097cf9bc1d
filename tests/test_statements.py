"""Provider statements settle effects: matching by reference, proofs of absence, and what a
line may never do. Effects and their dispatch windows are back-dated in SQL; statements are
the previous days' (periods are over)."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest

from ledger.models import (
    Effect,
    EffectEvent,
    Halt,
    Reason,
    ReviewItem,
    Severity,
    StatementLine,
    Tool,
)
from tests.helpers import events_of
from tests.test_statements_support import (
    add_event,
    day,
    db_now,
    dispatched,
    line,
    load_tools,
    run_import,
)


@pytest.fixture
def setup(db, tmp_path, make_effect):
    load_tools(tmp_path)
    now = db_now()
    period = day(now, 2)
    # A dispatch well inside the period: claimed at 10:00, timed out a minute later.
    return SimpleNamespace(now=now, period=period, claim=period[0] + timedelta(hours=10))


def reviews(effect: Effect) -> list[tuple[str, int]]:
    return [
        (r.reason, r.severity)
        for r in ReviewItem.objects.filter(effect=effect, resolved_at__isnull=True)
    ]


def fresh(effect: Effect) -> Effect:
    return Effect.objects.get(pk=effect.pk)


# --- Matching by reference, whatever the period ----------------------------------------------


def test_a_line_confirms_an_effect_of_any_period_kept_as_the_providers_record(setup, make_effect):
    period, claim = setup.period, setup.claim
    # Dispatched ten days ago: its window lies in no statement, yet its line matches.
    long_ago = claim - timedelta(days=8)
    effect = dispatched(make_effect, [(long_ago, long_ago + timedelta(minutes=1))])
    row = line(effect, claim)
    made = run_import(period, [row])

    effect = fresh(effect)
    assert effect.status == "confirmed"
    assert effect.provider_ref == row["provider_ref"]
    kept = StatementLine.objects.get(statement=made)
    assert kept.effect_id == effect.id and kept.outcome == "confirmed"
    statement_event = [e for e in events_of(effect.id) if e.kind == "statement"][-1]
    assert statement_event.data["statement_lines"][0]["provider_ref"] == row["provider_ref"]
    transition = events_of(effect.id)[-1]
    assert (transition.to_status, transition.reason) == ("confirmed", "statement_line")
    assert (made.confirmed, made.lines, made.lines_matched, made.phase) == (1, 1, 1, "done")


def test_lines_match_by_effect_id_with_mapped_columns_statuses_and_minor_units(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1))], tool="stmt_minor",
        request={"amount": 1250, "currency": "EUR"},
    )  # fmt: skip
    content = (
        "id,ref,amount,currency,state,occurred_at\n"
        f"ch_1,{effect.id},1250,EUR,paid,{claim.isoformat()}\n"
    ).encode()
    run_import(period, [], tool="stmt_minor", content=content)
    assert fresh(effect).status == "confirmed"


# --- Absence: every dispatch window inside final statements ----------------------------------


def test_absence_is_proven_only_when_every_window_lies_inside_final_statements(setup, make_effect):
    now, period, claim = setup.now, setup.period, setup.claim
    earlier = day(now, 3)
    first = earlier[0] + timedelta(hours=10)
    effect = dispatched(
        make_effect,
        [(first, first + timedelta(minutes=1)), (claim, claim + timedelta(minutes=1))],
    )
    run_import(period, [])  # the second window only: not enough
    assert fresh(effect).status == "unknown"

    run_import(earlier, [], provisional=True)  # a provisional statement proves nothing
    assert fresh(effect).status == "unknown"

    run_import(earlier, [])  # now both windows lie in final statements
    effect = fresh(effect)
    assert effect.status == "planned"
    assert events_of(effect.id)[-1].reason == "never_received"


def test_a_window_reaching_past_the_period_by_settle_after_and_skew_proves_nothing(
    setup, make_effect
):
    period = setup.period
    # Left dispatching 5 minutes before the period ends: + 2 min settle + 5 min skew is past it.
    late = period[1] - timedelta(minutes=6)
    effect = dispatched(make_effect, [(late, late + timedelta(minutes=1))])
    early = period[0] + timedelta(minutes=3)  # claim − skew lies before the period
    other = dispatched(make_effect, [(early, early + timedelta(minutes=1))])
    run_import(period, [])
    assert fresh(effect).status == "unknown"
    assert fresh(other).status == "unknown"


def test_proven_absence_plans_while_attempts_remain_and_fails_the_last_attempt(setup, make_effect):
    now, period, claim = setup.now, setup.period, setup.claim
    retryable = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1))], checks=4,
        next_check_at=now + timedelta(hours=1),
    )  # fmt: skip
    spent = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))], max_attempts=1)
    made = run_import(period, [])

    retryable, spent = fresh(retryable), fresh(spent)
    assert (retryable.status, retryable.checks, retryable.next_check_at) == ("planned", 0, None)
    assert spent.status == "failed"
    assert events_of(spent.id)[-1].reason == "never_sent"
    assert [e.kind for e in events_of(spent.id)][-2:] == ["statement", "transition"]
    assert (made.retried, made.failed) == (1, 1)


# --- What a statement may move ---------------------------------------------------------------


def test_only_unknown_and_lease_expired_dispatching_effects_move(setup, make_effect):
    now, period, claim = setup.now, setup.period, setup.claim
    expired = dispatched(make_effect, [(claim, None)], status="dispatching")
    live = dispatched(
        make_effect, [(claim, None)], status="dispatching",
        lease_expires_at=now + timedelta(minutes=5),
    )  # fmt: skip
    awaiting = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1))], status="awaiting_confirmation"
    )
    run_import(period, [line(e, claim, n=i) for i, e in enumerate([expired, live, awaiting])])

    assert fresh(expired).status == "confirmed"
    assert fresh(live).status == "dispatching"
    assert fresh(awaiting).status == "awaiting_confirmation"
    held = StatementLine.objects.get(effect=live)
    assert held.outcome == "held"


RECEIPTS = {
    "provider ref": ({"provider_ref": "ch_known"}, None),
    "webhook": ({}, ("transition", "unknown", "provider:sandbox-pay", '{"webhook": true}', "")),
    "found lookup": ({}, ("reconciliation", "unknown", "system:reconciler", "{}", "found")),
    "pending lookup": (
        {},
        ("reconciliation", "unknown", "system:reconciler", '{"status": "pending"}', "inconclusive"),
    ),
}


@pytest.mark.parametrize("receipt", sorted(RECEIPTS))
def test_no_line_or_absence_moves_an_effect_with_evidence_of_receipt(setup, make_effect, receipt):
    period, claim = setup.period, setup.claim
    fields, event = RECEIPTS[receipt]
    with_line = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))], **fields)
    without = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))], **fields)
    if event:
        kind, status, actor, data, reason = event
        for effect in (with_line, without):
            add_event(
                effect, claim + timedelta(minutes=2), kind=kind, frm=status, to=status,
                actor=actor, data=data, reason=reason,
            )  # fmt: skip
    row = line(with_line, claim, provider_ref="ch_known")
    run_import(period, [row])
    assert fresh(with_line).status == "unknown"
    assert fresh(without).status == "unknown"


# --- Outcomes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values", [{"amount": "12.51"}, {"currency": "USD"}], ids=["amount", "currency"]
)
def test_a_different_amount_or_currency_opens_amount_mismatch(setup, make_effect, values):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    made = run_import(period, [line(effect, claim, **values)])
    assert fresh(effect).status == "unknown"
    assert reviews(effect) == [(Reason.AMOUNT_MISMATCH, Severity.HIGH)]
    assert made.reviews == 1


def test_two_successful_charges_are_a_duplicate_that_halts_a_tool_that_asks(setup, make_effect):
    period, claim = setup.period, setup.claim
    Tool.objects.filter(name="stmt_pay").update(halt_on_duplicate=True)
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    made = run_import(period, [line(effect, claim, n=1), line(effect, claim, n=2)])
    assert fresh(effect).status == "unknown"
    assert reviews(effect) == [(Reason.DUPLICATE, Severity.HIGH)]
    assert Halt.objects.filter(scope="tool", value="stmt_pay", resumed_at__isnull=True).exists()
    assert made.duplicates == 1
    assert set(StatementLine.objects.filter(effect=effect).values_list("outcome", flat=True)) == {
        "duplicate"
    }


def test_two_charges_on_statements_of_different_periods_are_a_duplicate(setup, make_effect):
    now, period, claim = setup.now, setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    run_import(period, [line(effect, claim, n=1)])
    assert fresh(effect).status == "confirmed"
    nxt = day(now, 1)
    run_import(nxt, [line(effect, nxt[0] + timedelta(hours=1), n=2)])
    assert reviews(effect) == [(Reason.DUPLICATE, Severity.HIGH)]


CONTRADICTIONS = {
    "failed effect, succeeded charge": ("failed", {}, {}),
    "cancelled effect, succeeded charge": ("cancelled", {}, {}),
    "confirmed under another ref": ("confirmed", {"provider_ref": "ch_other"}, {}),
    "failed line for a confirmed effect": (
        "confirmed", {"provider_ref": "ch_x"}, {"provider_ref": "ch_x", "status": "failed"},
    ),
    "reversal of a confirmed charge": (
        "confirmed", {"provider_ref": "ch_x"}, {"provider_ref": "rv_1", "type": "reversal"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CONTRADICTIONS))
def test_a_line_that_contradicts_a_terminal_status_opens_review(setup, make_effect, case):
    period, claim = setup.period, setup.claim
    status, fields, values = CONTRADICTIONS[case]
    effect = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1))], status=status, **fields
    )
    run_import(period, [line(effect, claim, **values)])
    assert fresh(effect).status == status
    assert reviews(effect) == [(Reason.STATEMENT_CONTRADICTS, Severity.HIGH)]


def test_a_matching_line_for_a_confirmed_effect_changes_nothing(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1))], status="confirmed",
        provider_ref="ch_same",
    )  # fmt: skip
    before = EffectEvent.objects.filter(effect=effect).count()
    run_import(period, [line(effect, claim, provider_ref="ch_same")])
    assert reviews(effect) == []
    assert EffectEvent.objects.filter(effect=effect).count() == before


def test_a_line_for_an_effect_planned_again_is_a_duplicate(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))], status="planned")
    run_import(period, [line(effect, claim)])
    assert fresh(effect).status == "planned"
    assert reviews(effect) == [(Reason.DUPLICATE, Severity.HIGH)]


def test_a_line_from_before_the_last_claim_of_an_effect_dispatched_again_is_a_duplicate(
    setup, make_effect
):
    period, claim = setup.period, setup.claim
    again = claim + timedelta(hours=2)
    effect = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1)), (again, None)], status="dispatching"
    )
    run_import(period, [line(effect, claim + timedelta(seconds=30))])
    assert fresh(effect).status == "dispatching"
    assert reviews(effect) == [(Reason.DUPLICATE, Severity.HIGH)]


def test_the_line_of_the_current_dispatch_of_a_retried_effect_confirms_it(setup, make_effect):
    period, claim = setup.period, setup.claim
    again = claim + timedelta(hours=2)
    effect = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1)), (again, again + timedelta(minutes=1))]
    )
    run_import(period, [line(effect, again + timedelta(seconds=10))])
    assert fresh(effect).status == "confirmed"
    assert reviews(effect) == []


def test_a_declined_line_fails_an_unknown_effect(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    run_import(period, [line(effect, claim, status="failed")])
    assert fresh(effect).status == "failed"


# --- Other line types ------------------------------------------------------------------------


def test_a_refund_line_confirms_the_compensation_and_compensates_its_parent(setup, make_effect):
    period, claim = setup.period, setup.claim
    parent = make_effect("confirmed", tool="stmt_pay", provider_ref="ch_parent", attempt=1,
                         request={"amount": "12.50", "currency": "EUR"})  # fmt: skip
    refund = dispatched(
        make_effect, [(claim, claim + timedelta(minutes=1))], tool="stmt_refund",
        kind="compensation", parent=parent,
    )  # fmt: skip
    run_import(period, [line(refund, claim, provider_ref="re_1", type="refund")])
    assert fresh(refund).status == "confirmed"
    assert fresh(parent).status == "compensated"


def test_captures_are_summed_per_authorization_before_the_amount_is_compared(setup, make_effect):
    period, claim = setup.period, setup.claim
    whole = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    partial = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    rows = [
        line(whole, claim, provider_ref="au_1", type="capture", amount="10.00"),
        line(whole, claim, provider_ref="au_1", type="capture", amount="2.50"),
        line(partial, claim, provider_ref="au_2", type="capture", amount="10.00"),
    ]
    run_import(period, rows)
    assert fresh(whole).status == "confirmed"
    assert fresh(partial).status == "unknown"
    assert reviews(partial) == [(Reason.AMOUNT_MISMATCH, Severity.HIGH)]


def test_fees_are_recorded_and_move_nothing(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    made = run_import(period, [line(effect, claim, type="fee", amount="-0.30")])
    fee = StatementLine.objects.get(statement=made)
    assert (fee.type, fee.amount_minor, fee.effect_id) == ("fee", 30, effect.id)
    assert fresh(effect).status == "unknown"  # a line names it: not absent either
    assert reviews(effect) == []


def test_statement_events_carry_json_evidence(setup, make_effect):
    period, claim = setup.period, setup.claim
    effect = dispatched(make_effect, [(claim, claim + timedelta(minutes=1))])
    run_import(period, [line(effect, claim, amount="99.00")])
    event = [e for e in events_of(effect.id) if e.kind == "statement"][-1]
    assert event.data["mismatches"] == ["amount"]
    json.dumps(event.data)
