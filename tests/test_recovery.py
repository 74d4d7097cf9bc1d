"""POST /recovery: each incomplete effect with its allowed action, by tool capability."""

from __future__ import annotations

from django.db.models.expressions import RawSQL

from ledger.models import Effect, ReviewItem
from tests.helpers import expire_lease


def _actions(response) -> dict[str, tuple[str, str]]:
    assert response.status_code == 200, response.content
    return {
        item["effect"]["id"]: (item["action"], item["reason"])
        for item in response.json()["effects"]
    }


def _days_ago(days: int) -> RawSQL:
    return RawSQL("now() - make_interval(days => %s)", [days])


def _expired(alice, step_id: str, tool: str) -> dict:
    effect = alice.intent(step_id=step_id, tool=tool, request={"n": step_id}, claim=True)
    expire_lease(effect["id"])
    return effect


def test_the_plan_covers_every_branch_of_the_decision_table(alice):
    planned = alice.intent(step_id="planned")
    blocked = alice.intent(step_id="blocked", depends_on=[planned["id"]])
    live = alice.intent(step_id="live", claim=True)
    parked = alice.intent(step_id="parked", tool="create_ticket", claim=True)
    alice.outcome(parked["id"], parked["lease_token"], "awaiting_confirmation")
    read_only = _expired(alice, "read", "get_balance")
    lookup = _expired(alice, "lookup", "create_ticket")
    keyed = _expired(alice, "keyed", "refund_card")
    unsafe = _expired(alice, "unsafe", "send_email")
    undeclared = _expired(alice, "undeclared", "launch_rocket")
    done = alice.intent(step_id="done", claim=True)
    alice.outcome(done["id"], done["lease_token"])

    plan = _actions(alice.post("/recovery", {"run_id": "run-1", "dry_run": True}))
    assert plan == {
        planned["id"]: ("retry_safe", "planned"),
        blocked["id"]: ("wait", "blocked"),
        live["id"]: ("wait", "leased"),
        parked["id"]: ("wait", "awaiting_confirmation"),
        read_only["id"]: ("retry_safe", "read_only"),
        lookup["id"]: ("reconcile", "provider_lookup"),
        keyed["id"]: ("reconcile", "provider_lookup"),  # refund_card has a lookup too
        unsafe["id"]: ("review", "no_lookup"),
        undeclared["id"]: ("review", "no_lookup"),
    }


def test_a_dry_run_changes_nothing(alice):
    effect = _expired(alice, "unsafe", "send_email")
    alice.post("/recovery", {"dry_run": True})
    assert Effect.objects.get(pk=effect["id"]).status == "dispatching"
    assert not ReviewItem.objects.exists()


def test_recovery_sends_a_lost_unsafe_effect_to_unknown_and_review_never_to_failed(alice):
    effect = _expired(alice, "unsafe", "send_email")
    plan = alice.post("/recovery", {})
    item = plan.json()["effects"][0]
    assert item["action"] == "review"
    assert item["effect"]["status"] == "unknown"
    assert ReviewItem.objects.get(effect_id=effect["id"]).reason == "no_lookup"
    # Asking again opens no second review item.
    alice.post("/recovery", {})
    assert ReviewItem.objects.filter(effect_id=effect["id"]).count() == 1


def test_recovery_returns_a_read_only_effect_to_planned_for_a_retry(alice):
    effect = _expired(alice, "read", "get_balance")
    item = alice.post("/recovery", {}).json()["effects"][0]
    assert (item["action"], item["effect"]["status"]) == ("retry_safe", "planned")
    assert alice.claim(effect["id"])["attempt"] == 1  # the lost lease gave its attempt back


def test_an_idempotent_tool_without_lookup_is_retried_with_the_same_key_within_its_ttl(
    alice, tools
):
    tools["refund_card"].has_lookup = False
    tools["refund_card"].save()
    effect = _expired(alice, "keyed", "refund_card")
    item = alice.post("/recovery", {}).json()["effects"][0]
    assert (item["action"], item["reason"]) == ("retry_safe", "provider_honours_key")
    again = alice.claim(effect["id"])
    assert again["idempotency_key"] == effect["idempotency_key"]


def test_an_idempotent_tool_past_its_key_ttl_goes_to_review(alice, tools):
    tools["refund_card"].has_lookup = False
    tools["refund_card"].save()
    effect = _expired(alice, "keyed", "refund_card")
    Effect.objects.filter(pk=effect["id"]).update(created_at=_days_ago(2))
    item = alice.post("/recovery", {}).json()["effects"][0]
    assert (item["action"], item["reason"]) == ("review", "no_lookup")
    assert item["effect"]["status"] == "unknown"


def test_a_lookup_tool_is_queued_for_reconciliation_not_retried(alice):
    effect = _expired(alice, "lookup", "create_ticket")
    item = alice.post("/recovery", {}).json()["effects"][0]
    assert item["action"] == "reconcile"
    stored = Effect.objects.get(pk=effect["id"])
    assert stored.status == "dispatching"
    assert stored.next_check_at is not None


def test_an_unknown_effect_with_attempts_used_up_goes_to_review(alice):
    effect = alice.intent(tool="get_balance", request={})
    for _ in range(3):
        token = alice.claim(effect["id"])["lease_token"]
        alice.outcome(effect["id"], token, "not_sent")
    item = alice.post("/recovery", {}).json()["effects"][0]
    assert (item["action"], item["reason"]) == ("review", "attempts_exhausted")


def test_recovery_filters_by_owner_and_counts_unfinished_effects_by_status(alice):
    mine = alice.intent(step_id="a", claim=True, owner="w-1")
    alice.intent(step_id="b", claim=True, owner="w-2")
    done = alice.intent(step_id="c", claim=True, owner="w-1")
    alice.outcome(done["id"], done["lease_token"])
    body = alice.post("/recovery", {"owner": "w-1", "dry_run": True}).json()
    assert [item["effect"]["id"] for item in body["effects"]] == [mine["id"]]
    assert body["counts_by_status"] == {"dispatching": 1}


def test_an_effect_with_an_open_review_item_is_left_to_the_person(alice):
    from ledger.rules.reviewqueue import open_review

    effect = _expired(alice, "lookup", "create_ticket")  # would otherwise be reconciled
    open_review(effect["id"], "reconciliation_inconclusive")
    item = alice.post("/recovery", {}).json()["effects"][0]
    assert (item["action"], item["reason"]) == ("review", "reconciliation_inconclusive")
    assert Effect.objects.get(pk=effect["id"]).next_check_at is None
