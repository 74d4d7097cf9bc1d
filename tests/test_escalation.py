"""Escalation: effects still unresolved past their tool's window go to the review queue.

The clock is the database's: effects are made old by back-dating `created_at`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledger.models import Effect, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.alerts.escalation import escalate
from tests.factories import created_ago

INCOMPLETE = ["planned", "dispatching", "awaiting_confirmation", "unknown"]
TERMINAL = ["confirmed", "failed", "cancelled", "compensated"]


def open_items(effect: Effect) -> list[str]:
    return list(
        ReviewItem.objects.filter(effect=effect, resolved_at__isnull=True).values_list(
            "reason", flat=True
        )
    )


def test_an_effect_is_escalated_after_24_hours_and_not_a_minute_before(make_effect):
    young = created_ago(make_effect("unknown"), timedelta(hours=23, minutes=59))
    old = created_ago(make_effect("unknown"), timedelta(hours=24, minutes=1))

    assert escalate() == 1

    assert open_items(young) == []
    assert open_items(old) == ["unresolved_past_window"]


@pytest.mark.parametrize("status", INCOMPLETE)
def test_every_unresolved_status_is_escalated(make_effect, status):
    effect = created_ago(make_effect(status), timedelta(hours=25))

    assert escalate() == 1

    assert open_items(effect) == ["unresolved_past_window"]


@pytest.mark.parametrize("status", TERMINAL)
def test_a_resolved_effect_is_never_escalated_however_old(make_effect, status):
    effect = created_ago(make_effect(status), timedelta(days=30))

    assert escalate() == 0

    assert not ReviewItem.objects.filter(effect=effect).exists()


def test_the_escalation_item_is_due_24_hours_after_it_opens(make_effect):
    created_ago(make_effect("unknown"), timedelta(hours=25))

    escalate()

    item = ReviewItem.objects.get()
    assert item.reason == "unresolved_past_window"
    assert item.resolved_at is None
    assert item.due_at - item.opened_at == timedelta(hours=24)


def test_a_second_sweep_opens_no_second_item(make_effect):
    effect = created_ago(make_effect("unknown"), timedelta(hours=25))
    assert escalate() == 1

    assert escalate() == 0

    assert ReviewItem.objects.filter(effect=effect).count() == 1


def test_an_effect_already_under_review_is_not_given_a_second_item(make_effect):
    effect = created_ago(make_effect("unknown"), timedelta(hours=25))
    open_review(effect.id, "no_lookup")

    assert escalate() == 0

    assert open_items(effect) == ["no_lookup"]


def test_a_tool_with_a_shorter_window_escalates_sooner(make_effect, tools):
    tools["send_email"].escalate_after = timedelta(hours=1)
    tools["send_email"].save()
    email = created_ago(make_effect("unknown", tool="send_email"), timedelta(hours=1, minutes=1))
    email_young = created_ago(make_effect("unknown", tool="send_email"), timedelta(minutes=59))
    charge = created_ago(make_effect("unknown", tool="charge_card"), timedelta(hours=2))

    assert escalate() == 1

    assert open_items(email) == ["unresolved_past_window"]
    assert open_items(email_young) == []
    assert open_items(charge) == []


def test_a_tool_with_a_longer_window_escalates_later(make_effect, tools):
    tools["charge_card"].escalate_after = timedelta(hours=48)
    tools["charge_card"].save()
    within = created_ago(make_effect("unknown"), timedelta(hours=47))
    past = created_ago(make_effect("unknown"), timedelta(hours=49))
    email = created_ago(make_effect("unknown", tool="send_email"), timedelta(hours=25))

    assert escalate() == 2

    assert open_items(within) == []
    assert open_items(past) == ["unresolved_past_window"]
    assert open_items(email) == ["unresolved_past_window"]


def test_an_undeclared_tool_is_held_to_the_default_window(make_effect, tools):
    tools["send_email"].escalate_after = timedelta(hours=1)
    tools["send_email"].save()
    young = created_ago(make_effect("unknown", tool="launch_rocket"), timedelta(hours=2))
    old = created_ago(make_effect("unknown", tool="launch_rocket"), timedelta(hours=25))

    assert escalate() == 1

    assert open_items(young) == []
    assert open_items(old) == ["unresolved_past_window"]


def test_a_tools_own_resolve_within_sets_the_due_date_of_its_item(make_effect, tools):
    tools["charge_card"].resolve_within = timedelta(days=2)
    tools["charge_card"].backoffice_window = timedelta(days=9)
    tools["charge_card"].save()
    created_ago(make_effect("unknown"), timedelta(hours=25))

    escalate()

    item = ReviewItem.objects.get()
    assert item.due_at - item.opened_at == timedelta(days=2)
