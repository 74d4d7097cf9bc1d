"""The decision the evidence suggests for a review item: the right kind, pre-filled with every
field it needs where the evidence is conclusive, and for a queue page in a constant number of
queries."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import Effect, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import Ask, decide
from reviews.decisions.forms import DecisionForm
from reviews.decisions.suggest import suggest_for_rows, suggestion
from tests.factories import lookup


def item_for(effect: Effect, reason: Reason) -> ReviewItem:
    open_review(effect.id, reason)
    effect.refresh_from_db()
    return ReviewItem.objects.select_related("effect").get(effect=effect, resolved_at=None)


def complete(effect: Effect, action: str, initial: dict[str, Any]) -> bool:
    """Whether the suggestion alone fills its decision's form: nothing left to type."""
    data = {**initial, "version": effect.version, "confirm": "on"}
    return DecisionForm(data, action=action).is_valid()


def test_a_lookup_that_found_it_suggests_confirm_with_its_ref_and_the_event(make_effect):
    effect = make_effect("unknown", attempt=1)
    event_id = lookup(effect, "found", provider_ref="ch_42", status="confirmed")
    item = item_for(effect, Reason.INCONCLUSIVE)
    # A found record forbids a retry: confirm is what is left, and it is pre-filled.
    made = suggestion(item.effect, item)
    assert made.action == "confirm"
    assert made.initial["provider_ref"] == "ch_42"
    assert str(event_id) in made.initial["evidence"] and "ch_42" in made.initial["evidence"]
    assert "ch_42" in made.label
    assert complete(effect, "confirm", made.initial)


def test_a_lookup_that_found_it_failed_suggests_marking_it_failed(make_effect):
    effect = make_effect("unknown", attempt=1)
    lookup(effect, "found", provider_ref="ch_43", status="failed")
    item = item_for(effect, Reason.INCONCLUSIVE)
    made = suggestion(item.effect, item)
    assert made.action == "fail" and complete(effect, "fail", made.initial)


def test_a_lookup_that_proved_absence_suggests_a_retry(make_effect):
    effect = make_effect("unknown", attempt=1)
    event_id = lookup(effect, "not_found")
    item = item_for(effect, Reason.NOT_FOUND_UNPROVEN)
    made = suggestion(item.effect, item)
    assert made.action == "retry" and str(event_id) in made.initial["reason"]
    assert complete(effect, "retry", made.initial)


def test_a_duplicate_with_one_reference_in_all_suggests_not_a_duplicate(make_effect):
    charge = make_effect("confirmed", provider_ref="ch_1")
    lookup(charge, "duplicate", provider_ref="ch_1", refs=["ch_1"])
    item = item_for(charge, Reason.DUPLICATE)
    made = suggestion(item.effect, item)
    assert made.action == "not_duplicate"
    assert "one charge, ch_1" in made.initial["evidence"]
    assert complete(charge, "not_duplicate", made.initial)


def test_a_duplicate_with_two_references_suggests_refunding_the_other(make_effect):
    charge = make_effect("confirmed", provider_ref="ch_1")
    lookup(charge, "duplicate", provider_ref="ch_1", refs=["ch_1", "ch_2"])
    item = item_for(charge, Reason.DUPLICATE)
    made = suggestion(item.effect, item)
    assert made.action == "compensate"
    assert json.loads(made.initial["compensation_request"])["charge"] == "ch_2"
    assert complete(charge, "compensate", made.initial)


def test_a_mismatch_suggests_accepting_the_providers_record(make_effect):
    effect = make_effect("unknown", attempt=1)
    event_id = lookup(
        effect,
        "found",
        provider_ref="ch_7",
        status="confirmed",
        mismatches=["amount"],
        record={"id": "ch_7", "amount": "1.10"},
    )
    item = item_for(effect, Reason.MISMATCH)
    made = suggestion(item.effect, item)
    assert made.action == "accept_record"
    assert str(event_id) in made.initial["evidence"] and "amount" in made.initial["evidence"]
    assert complete(effect, "accept_record", made.initial)


def test_a_mismatch_whose_record_failed_suggests_marking_it_failed(make_effect):
    effect = make_effect("unknown", attempt=1)
    lookup(
        effect, "found", provider_ref="ch_8", status="failed", mismatches=["amount"],
        record={"id": "ch_8", "amount": "1.10", "status": "failed"},
    )  # fmt: skip
    item = item_for(effect, Reason.MISMATCH)
    made = suggestion(item.effect, item)
    assert made.action == "fail" and complete(effect, "fail", made.initial)


def test_attempts_exhausted_suggests_one_more_where_a_resend_is_safe(make_effect):
    spent = make_effect("unknown", attempt=3)
    item = item_for(spent, Reason.ATTEMPTS_EXHAUSTED)
    made = suggestion(item.effect, item)
    assert made.action == "extra_attempt" and complete(spent, "extra_attempt", made.initial)


def test_attempts_exhausted_suggests_nothing_where_a_resend_could_do_it_twice(make_effect):
    email = make_effect("unknown", tool="send_email", attempt=3)
    item = item_for(email, Reason.ATTEMPTS_EXHAUSTED)
    assert suggestion(item.effect, item) is None


def test_attempts_exhausted_on_a_planned_effect_suggests_cancelling(make_effect):
    planned = make_effect("planned", attempt=3)
    item = item_for(planned, Reason.ATTEMPTS_EXHAUSTED)
    made = suggestion(item.effect, item)
    assert made.action == "cancel" and complete(planned, "cancel", made.initial)


def test_a_compensation_by_hand_suggests_confirming_it(make_effect):
    by_hand = make_effect("planned", kind="compensation", tool="send_email")
    item = item_for(by_hand, Reason.MANUAL_EXECUTION)
    made = suggestion(item.effect, item)
    assert made.action == "confirm"
    # The reference is the operator's to give: the suggestion is not complete on its own.
    assert not complete(by_hand, "confirm", made.initial)


def test_no_suggestion_without_an_open_item(make_effect):
    assert suggestion(make_effect("unknown", attempt=1), None) is None


def test_a_suggested_decision_is_one_the_domain_accepts(make_effect, olga):
    effect = make_effect("unknown", attempt=1)
    lookup(effect, "found", provider_ref="ch_42", status="confirmed")
    item = item_for(effect, Reason.INCONCLUSIVE)
    made = suggestion(item.effect, item)
    fields = {k: v for k, v in made.initial.items() if k != "reason"}
    decided = decide(
        effect.id,
        Ask(made.action, made.initial["reason"], effect.version, **fields),
        user=olga,
    )
    assert (decided.target.status, decided.target.provider_ref) == ("confirmed", "ch_42")


def _queue_page(make_effect, rows: int) -> list[ReviewItem]:
    for n in range(rows):
        effect = make_effect("unknown", attempt=1 if n % 3 else 3)
        if n % 2:
            lookup(effect, "found", provider_ref=f"ch_{n}", status="confirmed")
        open_review(effect.id, Reason.INCONCLUSIVE if n % 3 else Reason.ATTEMPTS_EXHAUSTED)
    return list(ReviewItem.objects.select_related("effect").order_by("id"))


def test_suggestions_for_a_queue_page_cost_the_same_whatever_its_length(make_effect):
    items = _queue_page(make_effect, 50)
    with CaptureQueriesContext(connection) as five:
        suggest_for_rows(items[:5])
    with CaptureQueriesContext(connection) as fifty:
        made = suggest_for_rows(items)
    # The evidence (two queries), the clock, and the tool's policy: none of them per row.
    assert len(fifty) <= len(five) <= 5, [q["sql"][:80] for q in fifty]
    assert len(made) >= 25
    assert {s.action for s in made.values()} == {"confirm", "retry", "extra_attempt"}


def test_suggestions_for_rows_match_the_one_by_one_suggestion(make_effect):
    items = _queue_page(make_effect, 6)
    made = suggest_for_rows(items)
    for item in items:
        assert made.get(item.pk) == suggestion(item.effect, item)
