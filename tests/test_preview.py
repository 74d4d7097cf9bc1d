""" "What happens next": the preview in each decision form says the effect's next state, who acts
(which agent, and what its `/recovery` will answer), what the dependents will do and whether
money moves — and says what the real decision then does."""

from __future__ import annotations

from typing import Any

import pytest
from django.template.loader import render_to_string
from django.test import Client

from ledger.models import Effect, EffectDependency, Reason
from ledger.rules.reviewqueue import open_review
from reviews.decisions.kinds import ACTIONS
from reviews.decisions.preview import AGENT, LEDGER, NOBODY, PERSON, Preview, preview_for
from tests.factories import add_event, signed_in

CHARGE = {"amount": "10.00", "currency": "EUR"}


def texts(preview: Preview) -> str:
    return " | ".join(
        line.text + (f" {line.money}" if line.money else "") for line in preview.lines
    )


def unknown_charge(alice, step: str, *, run: str = "run-p", **body: Any) -> Effect:
    """A charge sent and lost: claimed, then reported unknown."""
    effect = alice.intent(run_id=run, step_id=step, request=CHARGE, **body)
    claimed = alice.claim(effect["id"])
    alice.outcome(effect["id"], claimed["lease_token"], "unknown")
    return Effect.objects.select_related("agent").get(pk=effect["id"])


def planned(alice, step: str, *, run: str = "run-p", **body: Any) -> Effect:
    effect = alice.intent(run_id=run, step_id=step, request=CHARGE, **body)
    return Effect.objects.select_related("agent").get(pk=effect["id"])


def confirmed(alice, step: str, *, run: str = "run-p") -> Effect:
    effect = alice.intent(run_id=run, step_id=step, request=CHARGE)
    claimed = alice.claim(effect["id"])
    alice.outcome(effect["id"], claimed["lease_token"], "confirmed", provider_ref=f"ch_{step}")
    return Effect.objects.select_related("agent").get(pk=effect["id"])


def decide(client: Client, effect: Effect, action: str, **fields: Any):
    effect.refresh_from_db()
    body = {"version": effect.version, "reason": "checked the provider", "confirm": "on"}
    body.update(fields)
    response = client.post(f"/effects/{effect.id}/decide/{action}", body)
    assert response.status_code == 302, response.content
    return response


def recovery_answer(alice, effect: Effect) -> dict[str, str]:
    """What the owning agent's `POST /recovery` (dry run) answers for this effect, for real."""
    response = alice.post("/recovery", {"run_id": effect.run_id, "dry_run": True})
    assert response.status_code == 200, response.content
    [item] = [i for i in response.json()["effects"] if i["effect"]["id"] == str(effect.id)]
    return {"action": item["action"], "reason": item["reason"]}


def test_a_retry_says_the_agent_resends_under_the_same_key_and_what_its_recovery_will_answer(
    olga, alice
):
    effect = unknown_charge(alice, "pay")
    open_review(effect.id, Reason.INCONCLUSIVE)

    preview = preview_for(effect, "retry")

    assert (preview.status, preview.actor, preview.agent) == ("planned", AGENT, "alice")
    assert effect.idempotency_key in texts(preview)
    assert "ledger does not resend" in texts(preview)
    assert preview.money_moves and "may charge 10.00 EUR" in texts(preview)
    assert "honours the idempotency key" in texts(preview)
    assert (preview.recovery.action, preview.recovery.reason) == ("retry_safe", "planned")
    assert any(line.when is not None for line in preview.lines)  # the item's due time

    decide(signed_in(olga), effect, "retry")
    effect.refresh_from_db()
    assert effect.status == preview.status
    assert recovery_answer(alice, effect) == {
        "action": preview.recovery.action,
        "reason": preview.recovery.reason,
    }


def test_a_retry_of_a_blocked_effect_says_its_recovery_will_wait_as_the_api_then_does(
    olga, alice, make_effect
):
    # Rows as they were before the upstream was reopened: an INSERT, not a transition.
    upstream = make_effect("planned")
    effect = make_effect("unknown", attempt=1, request=CHARGE)
    EffectDependency.objects.create(downstream=effect, upstream=upstream)

    preview = preview_for(effect, "retry")

    assert (preview.recovery.action, preview.recovery.reason) == ("wait", "blocked")
    decide(signed_in(olga), effect, "retry")
    assert recovery_answer(alice, effect) == {"action": "wait", "reason": "blocked"}


def test_a_retry_that_could_charge_twice_says_a_second_operator_must_approve(alice, tools):
    tool = tools["charge_card"]
    tool.honours_key, tool.key_ttl = False, None
    tool.save()
    effect = unknown_charge(alice, "pay")

    preview = preview_for(effect, "retry")

    assert (preview.status, preview.actor, preview.recovery) == ("unknown", PERSON, None)
    assert "second operator must approve" in texts(preview)
    assert not preview.money_moves


def test_confirming_frees_the_waiting_dependents_unless_another_upstream_holds_them(olga, alice):
    effect = unknown_charge(alice, "pay")
    other = planned(alice, "other")
    planned(alice, "free", depends_on=[str(effect.id)])
    planned(alice, "held", depends_on=[str(effect.id), str(other.id)])

    preview = preview_for(effect, "confirm")

    assert (preview.status, preview.actor, preview.money_moves) == ("confirmed", NOBODY, False)
    assert "1 waiting dependent will be unblocked" in texts(preview)
    assert "1 waiting dependent will stay blocked by another upstream" in texts(preview)
    assert "no money moves" in texts(preview)


def test_marking_failed_says_the_waiting_dependents_are_cancelled_and_they_are(olga, alice):
    effect = unknown_charge(alice, "pay")
    dependent = planned(alice, "next", depends_on=[str(effect.id)])

    preview = preview_for(effect, "fail")

    assert (preview.status, preview.actor, preview.money_moves) == ("failed", NOBODY, False)
    assert "1 waiting dependent will be cancelled" in texts(preview)
    decide(signed_in(olga), effect, "fail", evidence="provider says declined")
    dependent.refresh_from_db()
    assert (Effect.objects.get(pk=effect.id).status, dependent.status) == ("failed", "cancelled")


def test_cancelling_a_planned_effect_sends_nothing(alice):
    effect = planned(alice, "pay")
    dependent = planned(alice, "next", depends_on=[str(effect.id)])
    assert dependent.status == "planned"

    preview = preview_for(effect, "cancel")

    assert (preview.status, preview.actor, preview.money_moves) == ("cancelled", NOBODY, False)
    assert "claim of it will be refused" in texts(preview)
    assert "1 waiting dependent will be cancelled" in texts(preview)


def test_compensating_says_the_ledger_sends_the_refund_itself_with_the_amount(alice):
    effect = confirmed(alice, "pay")
    planned(alice, "ship", depends_on=[str(effect.id)])

    preview = preview_for(effect, "compensate")

    assert (preview.status, preview.actor, preview.money_moves) == ("confirmed", LEDGER, True)
    assert "through refund_card" in texts(preview)
    [money] = [line.money for line in preview.lines if line.money]
    assert money == "10.00 EUR"
    assert "becomes compensated" in texts(preview)
    assert "held back while the compensation is in flight" in texts(preview)


def test_compensating_a_duplicate_refunds_the_second_charge_and_keeps_the_first(alice):
    effect = confirmed(alice, "pay")
    open_review(effect.id, Reason.DUPLICATE)

    preview = preview_for(effect, "compensate")

    assert (preview.status, preview.money_moves) == ("confirmed", True)
    assert "refunds the provider's duplicate" in texts(preview)
    assert "becomes compensated" not in texts(preview)


def test_compensating_through_a_tool_nobody_can_execute_waits_for_a_person(alice, tools):
    tool = tools["charge_card"]
    tool.compensated_by = "send_email"
    tool.save()
    effect = confirmed(alice, "pay")

    preview = preview_for(effect, "compensate")

    assert preview.actor == PERSON
    assert "Nobody can send send_email automatically" in texts(preview)


def test_compensating_warns_of_dependents_that_already_acted(alice):
    effect = confirmed(alice, "pay")
    confirmed_dependent = alice.intent(
        run_id="run-p", step_id="ship", request=CHARGE, depends_on=[str(effect.id)]
    )
    alice.claim(confirmed_dependent["id"])

    preview = preview_for(effect, "compensate")

    assert "1 dependent may have acted on it already" in texts(preview)


def test_approving_a_held_effect_lets_its_agent_send_it(alice, tools):
    tool = tools["charge_card"]
    tool.amount_path, tool.currency_path = "amount", "currency"
    tool.limit_amount_per_day = {"EUR": "100000.00"}
    tool.approve_above = "5.00"
    tool.save()
    effect = planned(alice, "big")
    assert effect.status == "awaiting_approval"

    approve, reject = preview_for(effect, "approve"), preview_for(effect, "reject")

    assert (approve.status, approve.actor, approve.money_moves) == ("planned", AGENT, True)
    assert "Agent alice may now claim and send it" in texts(approve)
    assert [line.money for line in approve.lines if line.money] == ["10.00 EUR"]
    assert (reject.status, reject.money_moves) == ("cancelled", False)


def test_accepting_the_providers_record_gives_an_unknown_effect_the_records_outcome(alice):
    effect = unknown_charge(alice, "pay")
    add_event(effect, "mismatch", record={"status": "declined"}, status="declined")

    preview = preview_for(effect, "accept_record")

    assert (preview.status, preview.actor, preview.money_moves) == ("failed", NOBODY, False)
    assert "as the provider's record says" in texts(preview)


@pytest.mark.parametrize("action", ["not_duplicate", "accept_record"])
def test_closing_decisions_leave_a_settled_effect_as_it_is_and_move_nothing(alice, action):
    effect = confirmed(alice, "pay")

    preview = preview_for(effect, action)

    assert (preview.status, preview.actor, preview.money_moves) == ("confirmed", NOBODY, False)
    assert "review item closes" in texts(preview)


def test_one_more_attempt_returns_an_exhausted_effect_to_planned_with_room_to_send(make_effect):
    effect = make_effect("unknown", attempt=3, max_attempts=3, request=CHARGE)

    retry, extra = preview_for(effect, "retry"), preview_for(effect, "extra_attempt")

    assert "refuse" in texts(retry) and retry.status == "unknown"
    assert (extra.status, extra.actor) == ("planned", AGENT)
    assert (extra.recovery.action, extra.recovery.reason) == ("retry_safe", "planned")
    assert "attempt 3 of 4" in texts(extra)


def test_an_unknown_action_gets_a_generic_preview(alice):
    effect = planned(alice, "pay")

    preview = preview_for(effect, "frobnicate")

    assert (preview.status, preview.actor) == ("planned", PERSON)
    assert "cannot say in advance" in texts(preview)


def test_every_action_previews_in_a_few_queries_for_the_whole_page(
    alice, django_assert_max_num_queries
):
    effect = unknown_charge(alice, "pay")
    planned(alice, "next", depends_on=[str(effect.id)])
    effect = Effect.objects.select_related("agent").get(pk=effect.id)
    actions = [*ACTIONS, "frobnicate"]

    with django_assert_max_num_queries(12):
        previews = [preview_for(effect, action) for action in actions]

    assert len({p.action for p in previews}) == len(actions)


def test_the_partial_shows_the_next_state_as_a_badge_and_the_money_in_bold(alice):
    effect = unknown_charge(alice, "pay")

    html = render_to_string("reviews/_preview.html", {"preview": preview_for(effect, "retry")})

    assert "What happens next" in html
    assert '<span class="status status-planned">planned</span>' in html
    assert '<strong class="money">10.00 EUR</strong>' in html
    assert "style=" not in html
    assert render_to_string("reviews/_preview.html", {"preview": None}).strip() == ""


def test_the_effect_page_shows_each_offered_decisions_preview(olga, alice):
    effect = unknown_charge(alice, "pay")
    open_review(effect.id, Reason.INCONCLUSIVE)

    html = signed_in(olga).get(f"/effects/{effect.id}/").content.decode()

    assert 'data-preview="retry" data-next-status="planned" data-actor="agent"' in html
    assert 'data-recovery="retry_safe"' in html
    assert 'data-preview="confirm" data-next-status="confirmed" data-actor="nobody"' in html
    assert 'data-preview="fail" data-next-status="failed"' in html
