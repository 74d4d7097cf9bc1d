"""Decision kinds apply only where they fit the open review item and the provider's evidence;
the domain refuses the rest with 409 and a reason code, and every reason a review opens for has
a decision that closes it (without a side effect where none is needed)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ledger.errors import Refused, ValidationFailed
from ledger.models import Effect, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import Ask, decide
from reviews.decisions.kinds import KINDS
from reviews.decisions.offer import allowed_actions
from tests.factories import lookup, signed_in
from tests.helpers import events_of


def found_lookup(effect: Effect, *, ref: str = "ch_1", status: str = "confirmed", **data: Any):
    """A reconciliation event: the provider's lookup found `ref`, with its record."""
    record = {"id": ref, "amount": "1.00", "currency": "EUR", "status": status}
    lookup(effect, "found", provider_ref=ref, status=status, record=record, **data)


def with_item(effect: Effect, reason: Reason) -> Effect:
    open_review(effect.id, reason)
    effect.refresh_from_db()
    return effect


def ask(effect: Effect, action: str, **fields: Any) -> Ask:
    return Ask(action, fields.pop("reason", "checked"), effect.version, **fields)


def item_of(effect: Effect) -> ReviewItem:
    return ReviewItem.objects.get(effect=effect)


@pytest.fixture
def mismatch(make_effect) -> Effect:
    """An unknown charge whose lookup found it for another amount."""
    effect = make_effect("unknown", attempt=1)
    found_lookup(effect, ref="ch_7", mismatches=["amount"])
    return with_item(effect, Reason.MISMATCH)


# (reason, status, fields, with a found lookup, the decisions offered)
OFFERED = [
    (
        Reason.DUPLICATE,
        "confirmed",
        {"provider_ref": "ch_1"},
        False,
        {"compensate", "not_duplicate"},
    ),
    (Reason.MISMATCH, "unknown", {"attempt": 1}, True, {"confirm", "fail", "accept_record"}),
    (Reason.AMOUNT_MISMATCH, "confirmed", {}, False, {"compensate", "accept_record"}),
    (Reason.STATEMENT_CONTRADICTS, "failed", {}, False, {"accept_record"}),
    (Reason.STATEMENT_LINE_REMOVED, "confirmed", {}, False, {"compensate", "accept_record"}),
    (Reason.COMPENSATION_FAILED, "confirmed", {}, False, {"compensate", "accept_record"}),
    (
        Reason.ATTEMPTS_EXHAUSTED,
        "unknown",
        {"attempt": 3},
        False,
        {"confirm", "fail", "extra_attempt"},
    ),
    (Reason.ATTEMPTS_EXHAUSTED, "planned", {"attempt": 3}, False, {"cancel", "extra_attempt"}),
    (Reason.INCONCLUSIVE, "unknown", {"attempt": 1}, False, {"confirm", "fail", "retry"}),
    (Reason.INCONCLUSIVE, "unknown", {"attempt": 1}, True, {"confirm", "fail"}),
    (
        Reason.NO_LOOKUP,
        "unknown",
        {"attempt": 1, "tool": "send_email"},
        False,
        {"confirm", "fail", "retry"},
    ),
    (Reason.NOT_FOUND_UNPROVEN, "unknown", {"attempt": 1}, False, {"confirm", "fail", "retry"}),
    (Reason.STALE, "awaiting_confirmation", {"attempt": 1}, False, {"confirm", "fail"}),
]


@pytest.mark.parametrize(("reason", "status", "fields", "found", "offered"), OFFERED)
def test_each_item_is_offered_exactly_the_decisions_that_apply_to_it(
    make_effect, olga, reason, status, fields, found, offered
):
    effect = make_effect(status, **fields)
    if found:
        found_lookup(effect, mismatches=["amount"] if reason == Reason.MISMATCH else [])
    effect = with_item(effect, reason)
    assert set(allowed_actions(effect, olga)) == offered
    # Each offered kind declares that it closes items of this reason.
    assert all(reason in KINDS[action].closes for action in offered)


# (reason, status, fields, the decision that closes it, its fields, the status after it)
CLOSES = [
    # Restore mode put it in doubt before anyone claimed it: confirmed from the provider's record.
    (
        Reason.RESTORED_GAP,
        "unknown",
        {},
        "confirm",
        {"provider_ref": "ch_9", "evidence": "found in the provider's dashboard"},
        "confirmed",
    ),
    (
        Reason.NO_LOOKUP,
        "unknown",
        {"tool": "send_email", "attempt": 1},
        "fail",
        {"evidence": "bounced"},
        "failed",
    ),
    (Reason.ATTEMPTS_EXHAUSTED, "unknown", {"attempt": 3}, "extra_attempt", {}, "planned"),
    (
        Reason.INCONCLUSIVE,
        "unknown",
        {"attempt": 1},
        "confirm",
        {"provider_ref": "ch_2", "evidence": "dashboard"},
        "confirmed",
    ),
    (
        Reason.STALE,
        "awaiting_confirmation",
        {"attempt": 1},
        "fail",
        {"evidence": "declined"},
        "failed",
    ),
    (
        Reason.DUPLICATE,
        "confirmed",
        {"provider_ref": "ch_1"},
        "not_duplicate",
        {"evidence": "one charge, ch_1"},
        "confirmed",
    ),
    (
        Reason.MISMATCH,
        "unknown",
        {"attempt": 1},
        "accept_record",
        {"evidence": "their record"},
        "confirmed",
    ),
    (Reason.NOT_FOUND_UNPROVEN, "unknown", {"attempt": 1}, "retry", {}, "planned"),
    (
        Reason.COMPENSATION_FAILED,
        "confirmed",
        {},
        "accept_record",
        {"evidence": "charge stands"},
        "confirmed",
    ),
    (
        Reason.COMPENSATION_UNKNOWN,
        "unknown",
        {"attempt": 1, "kind": "compensation", "tool": "refund_card"},
        "confirm",
        {"provider_ref": "re_1", "evidence": "refunded"},
        "confirmed",
    ),
    (
        Reason.MANUAL_EXECUTION,
        "planned",
        {"kind": "compensation", "tool": "send_email"},
        "cancel",
        {},
        "cancelled",
    ),
    (
        Reason.AMOUNT_MISMATCH,
        "confirmed",
        {},
        "accept_record",
        {"evidence": "line 3: 1.10"},
        "confirmed",
    ),
    (
        Reason.STATEMENT_CONTRADICTS,
        "failed",
        {},
        "accept_record",
        {"evidence": "no line"},
        "failed",
    ),
    (
        Reason.STATEMENT_LINE_REMOVED,
        "confirmed",
        {},
        "accept_record",
        {"evidence": "revised"},
        "confirmed",
    ),
    # The same request sent twice in one run (ledger.containment.repeated), meant both times.
    (
        Reason.REPEATED_REQUEST,
        "confirmed",
        {"provider_ref": "ch_2"},
        "not_duplicate",
        {"evidence": "two invoices of the same amount"},
        "confirmed",
    ),
]


def test_the_table_covers_every_reason_a_review_opens_for():
    covered = {row[0] for row in CLOSES} | {Reason.APPROVAL_REQUIRED}  # four-eyes: test_approvals
    assert covered == set(Reason)


@pytest.mark.parametrize(("reason", "status", "fields", "action", "asked", "after"), CLOSES)
def test_every_reason_has_a_decision_that_closes_it(
    make_effect, olga, reason, status, fields, action, asked, after
):
    effect = make_effect(status, **fields)
    if reason == Reason.MISMATCH:
        found_lookup(effect, mismatches=["amount"])
    effect = with_item(effect, reason)
    assert action in allowed_actions(effect, olga)

    decided = decide(effect.id, ask(effect, action, **asked), user=olga)

    assert decided.target.status == after
    item = item_of(effect)
    assert item.resolved_at is not None and item.decision_id == decided.decision.id
    assert decided.follow_up is None  # no compensation, nothing sent
    assert decided.decision.provenance["action"] == action


def test_not_a_duplicate_closes_the_item_without_moving_the_charge(make_effect, olga):
    charge = with_item(make_effect("confirmed", provider_ref="ch_1"), Reason.DUPLICATE)
    events_before = len(events_of(charge.id))
    decided = decide(
        charge.id, ask(charge, "not_duplicate", evidence="checked the provider: one charge, ch_1"),
        user=olga,
    )  # fmt: skip
    charge.refresh_from_db()
    assert (charge.status, charge.version) == ("confirmed", decided.target.version)
    assert len(events_of(charge.id)) == events_before  # not moved at all
    assert decided.decision.provenance["evidence"] == "checked the provider: one charge, ch_1"
    assert not Effect.objects.filter(parent=charge, kind="compensation").exists()


def test_not_a_duplicate_needs_evidence(make_effect, olga):
    charge = with_item(make_effect("confirmed", provider_ref="ch_1"), Reason.DUPLICATE)
    with pytest.raises(ValidationFailed) as refused:
        decide(charge.id, ask(charge, "not_duplicate"), user=olga)
    assert "evidence" in refused.value.extra["fields"]
    assert item_of(charge).resolved_at is None


@pytest.mark.parametrize("action", ["not_duplicate", "accept_record", "extra_attempt"])
def test_a_kind_for_another_item_is_refused_with_a_code(make_effect, olga, action):
    effect = with_item(make_effect("unknown", attempt=1), Reason.INCONCLUSIVE)
    with pytest.raises(Refused) as refused:
        decide(effect.id, ask(effect, action, evidence="x"), user=olga)
    assert (refused.value.status, refused.value.code) == (409, "does_not_apply")
    effect.refresh_from_db()
    assert effect.status == "unknown" and item_of(effect).resolved_at is None


def test_accepting_the_record_settles_an_unknown_effect_as_the_provider_has_it(mismatch, olga):
    decided = decide(mismatch.id, ask(mismatch, "accept_record", evidence="their 1.00"), user=olga)
    mismatch.refresh_from_db()
    assert (mismatch.status, mismatch.provider_ref) == ("confirmed", "ch_7")
    provenance = decided.decision.provenance
    assert provenance["accepted_record"]["id"] == "ch_7"
    assert provenance["accepted_record_event"] is not None


def test_accepting_a_failed_record_marks_the_effect_failed(make_effect, olga):
    effect = make_effect("unknown", attempt=1)
    found_lookup(effect, ref="ch_8", status="failed", mismatches=["amount"])
    effect = with_item(effect, Reason.MISMATCH)
    decide(effect.id, ask(effect, "accept_record", evidence="declined"), user=olga)
    effect.refresh_from_db()
    assert effect.status == "failed"


def test_accepting_the_record_of_a_settled_effect_keeps_its_status(make_effect, olga):
    charge = with_item(make_effect("confirmed", provider_ref="ch_1"), Reason.AMOUNT_MISMATCH)
    decided = decide(charge.id, ask(charge, "accept_record", evidence="line says 1.10"), user=olga)
    charge.refresh_from_db()
    assert charge.status == "confirmed" and decided.target.version == charge.version
    assert item_of(charge).resolved_at is not None


def test_no_retry_once_the_lookup_found_the_effect(make_effect, olga):
    effect = make_effect("unknown", attempt=1)
    found_lookup(effect, ref="ch_5")
    effect = with_item(effect, Reason.INCONCLUSIVE)
    with pytest.raises(Refused) as refused:
        decide(effect.id, ask(effect, "retry"), user=olga)
    assert refused.value.code == "record_found"
    assert "ch_5" in refused.value.detail and "second time" in refused.value.detail


def test_no_retry_while_a_mismatch_is_open(make_effect, olga):
    effect = with_item(make_effect("unknown", attempt=1), Reason.MISMATCH)
    with pytest.raises(Refused) as refused:
        decide(effect.id, ask(effect, "retry"), user=olga)
    assert refused.value.code == "mismatch_open"
    effect.refresh_from_db()
    assert effect.status == "unknown"


def test_one_more_attempt_raises_the_cap_and_returns_the_effect_to_planned(make_effect, olga):
    spent = with_item(make_effect("unknown", attempt=3), Reason.ATTEMPTS_EXHAUSTED)
    key = spent.idempotency_key
    decided = decide(spent.id, ask(spent, "extra_attempt"), user=olga)
    spent.refresh_from_db()
    assert (spent.status, spent.max_attempts, spent.attempt) == ("planned", 4, 3)
    assert spent.idempotency_key == key
    assert decided.decision.provenance["ground"] == "provider_honours_key"


def test_one_more_attempt_for_a_planned_effect_keeps_it_planned_with_a_higher_cap(
    make_effect, olga
):
    spent = with_item(make_effect("planned", attempt=3), Reason.ATTEMPTS_EXHAUSTED)
    decide(spent.id, ask(spent, "extra_attempt"), user=olga)
    before = spent.version
    spent.refresh_from_db()
    assert (spent.status, spent.max_attempts, spent.version) == ("planned", 4, before + 1)
    last = events_of(spent.id)[-1]
    assert (last.from_status, last.to_status, last.data["max_attempts"]) == (
        "planned",
        "planned",
        4,
    )


def test_one_more_attempt_is_refused_where_a_resend_could_do_it_twice(make_effect, olga):
    email = with_item(
        make_effect("unknown", tool="send_email", attempt=3), Reason.ATTEMPTS_EXHAUSTED
    )
    assert "extra_attempt" not in allowed_actions(email, olga)
    with pytest.raises(Refused) as refused:
        decide(email.id, ask(email, "extra_attempt"), user=olga)
    assert refused.value.code == "retry_unsafe"
    email.refresh_from_db()
    assert (email.status, email.max_attempts) == ("unknown", 3)


def test_one_more_attempt_is_refused_once_the_lookup_found_it(make_effect, olga):
    spent = make_effect("unknown", attempt=3)
    found_lookup(spent, ref="ch_3")
    spent = with_item(spent, Reason.ATTEMPTS_EXHAUSTED)
    with pytest.raises(Refused) as refused:
        decide(spent.id, ask(spent, "extra_attempt"), user=olga)
    assert refused.value.code == "record_found"


def test_deciding_over_another_operators_hold_needs_the_askers_say_so(make_effect, olga, otto):
    effect = with_item(make_effect("unknown", attempt=1), Reason.INCONCLUSIVE)
    held_at = datetime(2026, 1, 5, 10, 2, tzinfo=UTC)
    # The hold's start is the item's `held_at` column.
    ReviewItem.objects.filter(effect=effect).update(assignee=olga, held_at=held_at)
    fields = {"provider_ref": "ch_1", "evidence": "dashboard"}
    with pytest.raises(Refused) as refused:
        decide(effect.id, ask(effect, "confirm", **fields), user=otto)
    assert (refused.value.status, refused.value.code) == (409, "held_by_other")
    assert refused.value.extra["held_by"] == "olga"
    assert refused.value.detail.startswith("olga is working on this since 10:02")
    assert refused.value.extra["held_at"] == held_at.isoformat()
    effect.refresh_from_db()
    assert effect.status == "unknown"

    decided = decide(effect.id, ask(effect, "confirm", over_hold=True, **fields), user=otto)
    assert decided.target.status == "confirmed"
    # Recorded under the name decisions were first stored with.
    assert decided.decision.request["over_claim"] is True


def test_the_holder_decides_without_being_asked(make_effect, olga):
    effect = with_item(make_effect("unknown", attempt=1), Reason.INCONCLUSIVE)
    ReviewItem.objects.filter(effect=effect).update(assignee=olga)
    decide(effect.id, ask(effect, "fail", evidence="declined"), user=olga)
    effect.refresh_from_db()
    assert effect.status == "failed"


def test_the_page_refuses_a_kind_that_does_not_apply_with_409(make_effect, olga):
    effect = with_item(make_effect("unknown", attempt=1), Reason.INCONCLUSIVE)
    response = signed_in(olga).post(
        f"/effects/{effect.id}/decide/not_duplicate",
        {"version": effect.version, "reason": "x", "evidence": "y", "confirm": "on"},
    )
    assert response.status_code == 409
    assert "closes a duplicate or repeated_request review item" in response.content.decode()
    assert item_of(effect).resolved_at is None


def test_the_page_refuses_an_unknown_decision_kind_with_404(make_effect, olga):
    effect = with_item(make_effect("unknown", attempt=1), Reason.INCONCLUSIVE)
    response = signed_in(olga).post(
        f"/effects/{effect.id}/decide/refund_everything",
        {"version": effect.version, "reason": "x", "confirm": "on"},
    )
    assert response.status_code == 404
