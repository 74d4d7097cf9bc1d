"""Four-eyes approval: intents above a tool's `approve_above` wait in awaiting_approval for a
second operator; retries on an operator's word alone wait for a second operator too."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from ledger.effects.transitions import transition
from ledger.models import Effect, Reason, RetryProposal, ReviewItem, Tool
from ledger.models.states import Status
from ledger.policy.toolfile import ToolFileError, load
from ledger.restore import mode
from ledger.rules.reviewqueue import open_review
from reviews.alerts.escalation import escalate
from tests.factories import signed_in
from tests.helpers import assert_error, events_of

BIG = {"amount": "1500.00", "currency": "EUR"}
SMALL = {"amount": "999.99", "currency": "EUR"}


@pytest.fixture
def four_eyes(tools) -> Tool:
    """charge_card with an approval threshold of 1000.00 (and the amount limit it needs)."""
    tool = tools["charge_card"]
    tool.amount_path, tool.currency_path = "amount", "currency"
    tool.limit_amount_per_day = {"EUR": "100000.00"}
    tool.approve_above = Decimal("1000.00")
    tool.save()
    return tool


def post_decision(client: Client, effect: Effect, action: str, **fields: Any):
    effect.refresh_from_db()
    body = {"version": effect.version, "reason": "looked at it", "confirm": "on"}
    body.update(fields)
    return client.post(f"/effects/{effect.id}/decide/{action}", body)


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind="decision").order_by("created_at"))


def held(alice, step: str = "big", **body: Any) -> Effect:
    """An intent above the threshold, posted with a claim: 202, no lease."""
    response = alice.post(
        "/effects",
        {
            "run_id": "run-1",
            "step_id": step,
            "tool": "charge_card",
            "target": "acct_42",
            "request": BIG,
            "claim": True,
            "owner": "worker-1",
            **body,
        },
    )
    assert response.status_code == 202, response.content
    shown = response.json()
    assert shown["status"] == "awaiting_approval"
    assert shown.get("lease_token") is None and shown["lease_expires_at"] is None
    return Effect.objects.get(pk=shown["id"])


# --- the agent's side -------------------------------------------------------------------------


def test_an_intent_above_the_threshold_is_held_with_a_202_and_an_approval_item(alice, four_eyes):
    effect = held(alice)

    assert effect.attempt == 0 and effect.lease_token is None
    [item] = ReviewItem.objects.filter(effect=effect)
    assert (item.reason, item.resolved_at) == (Reason.APPROVAL_REQUIRED, None)
    [intent] = [e for e in events_of(str(effect.id)) if e.kind == "intent"]
    assert intent.to_status == "awaiting_approval"


def test_an_intent_at_or_below_the_threshold_is_claimed_as_before(alice, four_eyes):
    small = alice.intent(step_id="small", request=SMALL, claim=True, owner="w")
    at = alice.intent(step_id="at", request={"amount": "1000", "currency": "EUR"}, claim=True)

    assert small["status"] == at["status"] == "dispatching"
    assert small["lease_token"]


def test_a_repeat_returns_the_same_effect_and_the_threshold_is_not_evaluated_again(
    alice, four_eyes
):
    effect = held(alice)
    four_eyes.approve_above = None  # the tool changes after the insert: the effect does not
    four_eyes.save()

    again = alice.post(
        "/effects",
        {
            "run_id": "run-1",
            "step_id": "big",
            "tool": "charge_card",
            "target": "acct_42",
            "request": BIG,
            "claim": True,
        },
    )

    assert again.status_code == 202, again.content
    assert again.json()["id"] == str(effect.id)
    assert again.json()["status"] == "awaiting_approval"
    assert Effect.objects.filter(run_id="run-1").count() == 1


def test_an_intent_without_a_claim_is_recorded_201_awaiting_approval(alice, four_eyes):
    shown = alice.intent(step_id="noclaim", request=BIG)
    assert shown["status"] == "awaiting_approval"


def test_a_claim_of_an_effect_awaiting_approval_is_409_approval_required(alice, four_eyes):
    effect = held(alice)

    response = alice.post(f"/effects/{effect.id}/claim", {"owner": "worker-1"})

    body = assert_error(response, 409, "approval_required")
    assert body["status"] == "awaiting_approval"
    effect.refresh_from_db()
    assert (effect.status, effect.attempt) == ("awaiting_approval", 0)


def test_recovery_tells_the_agent_to_wait_for_the_approval(alice, four_eyes):
    effect = held(alice)

    response = alice.post("/recovery", {"run_id": "run-1", "dry_run": False})

    [entry] = [e for e in response.json()["effects"] if e["effect"]["id"] == str(effect.id)]
    assert (entry["action"], entry["reason"]) == ("wait", "awaiting_approval")
    effect.refresh_from_db()
    assert effect.status == "awaiting_approval"


def test_an_effect_awaiting_approval_is_escalated_like_any_unresolved_one(make_effect):
    waiting = make_effect("awaiting_approval")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET created_at = now() - interval '25 hours' WHERE id = %s",
            [waiting.id],
        )

    assert escalate() == 1
    assert ReviewItem.objects.get(effect=waiting).reason == Reason.STALE


def test_a_failed_upstream_cancels_a_dependent_awaiting_approval(alice, four_eyes, olga):
    upstream = alice.intent(step_id="first", request=SMALL, claim=True, owner="w")
    effect = held(alice, step="second", depends_on=[upstream["id"]])
    chained = alice.intent(step_id="third", request=SMALL, depends_on=[str(effect.id)])

    alice.outcome(upstream["id"], upstream["lease_token"], "failed", error={"code": "declined"})

    effect.refresh_from_db()
    assert effect.status == "cancelled"
    assert Effect.objects.get(pk=chained["id"]).status == "cancelled"
    [cancel] = [e for e in events_of(str(effect.id)) if e.to_status == "cancelled"]
    assert (cancel.from_status, cancel.reason) == ("awaiting_approval", "upstream_failed")


# --- the operators' side ----------------------------------------------------------------------


def test_another_operator_approves_and_the_agent_can_claim(alice, four_eyes, olga):
    effect = held(alice)

    response = post_decision(signed_in(olga), effect, "approve")

    assert response.status_code == 302
    effect.refresh_from_db()
    assert effect.status == "planned"
    [decision] = decisions_on(effect)
    assert decision.provenance["action"] == "approve"
    assert decision.provenance["actor"] == "operator:olga"
    assert (decision.provenance["before"]["status"], decision.provenance["after"]["status"]) == (
        "awaiting_approval",
        "planned",
    )
    item = ReviewItem.objects.get(effect=effect)
    assert (item.resolved_by, item.decision_id) == (olga, decision.id)
    claimed = alice.claim(str(effect.id))
    assert claimed["status"] == "dispatching" and claimed["lease_token"]


def test_rejecting_cancels_the_effect_with_a_decision(alice, four_eyes, otto):
    effect = held(alice)

    assert post_decision(signed_in(otto), effect, "reject").status_code == 302

    effect.refresh_from_db()
    assert effect.status == "cancelled"
    assert [d.provenance["action"] for d in decisions_on(effect)] == ["reject"]
    assert alice.get(f"/effects/{effect.id}").json()["status"] == "cancelled"


def test_the_operator_who_asked_cannot_approve_their_own_request(
    alice, four_eyes, olga, otto, make_effect
):
    # An operator's own request: a compensation olga asked for, above the refund tool's limit.
    effect = make_effect("awaiting_approval")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status, "
            "reason, data, digest, created_at) VALUES (%s, 'intent', 'operator:olga', '', "
            "'awaiting_approval', 'intent', '{}'::jsonb, '', now())",
            [effect.id],
        )

    page = signed_in(olga).get(f"/effects/{effect.id}")
    assert b'id="decide-approve"' not in page.content
    refused = post_decision(signed_in(olga), effect, "approve")

    assert refused.status_code == 409
    assert "another operator" in refused.content.decode()
    effect.refresh_from_db()
    assert effect.status == "awaiting_approval" and decisions_on(effect) == []
    assert post_decision(signed_in(otto), effect, "approve").status_code == 302
    effect.refresh_from_db()
    assert effect.status == "planned"


def test_an_agent_cannot_approve(alice, four_eyes, nemo):
    effect = held(alice)
    # No API route decides; the operator pages refuse an agent's key and a person without a role.
    by_key = alice.http.post(
        f"/effects/{effect.id}/decide/approve",
        {"version": effect.version, "reason": "me", "confirm": "on"},
        headers={"Authorization": f"Bearer {alice.key}"},
    )
    by_nobody = post_decision(signed_in(nemo), effect, "approve")
    by_api = alice.post(f"/effects/{effect.id}/approve", {})

    assert by_key.status_code in (302, 403)
    assert by_nobody.status_code == 403
    assert by_api.status_code in (404, 405)
    effect.refresh_from_db()
    assert effect.status == "awaiting_approval" and decisions_on(effect) == []


def test_approve_is_refused_where_nothing_waits(olga, make_effect):
    planned = make_effect("planned")
    response = post_decision(signed_in(olga), planned, "approve")
    assert response.status_code == 409
    planned.refresh_from_db()
    assert planned.status == "planned" and decisions_on(planned) == []


# --- unsafe retries ---------------------------------------------------------------------------


@pytest.fixture
def unsafe_unknown(make_effect) -> Effect:
    email = make_effect("unknown", tool="send_email", attempt=1)
    open_review(email.id, Reason.NO_LOOKUP)
    return email


def test_an_unsafe_retry_is_a_proposal_until_a_second_operator_confirms(olga, otto, unsafe_unknown):
    email = unsafe_unknown
    proposed = post_decision(
        signed_in(olga), email, "retry", verified_absent="on", evidence="mail log: nothing sent"
    )

    assert proposed.status_code == 302
    email.refresh_from_db()
    assert email.status == "unknown"
    proposal = RetryProposal.objects.get(effect=email)
    assert (proposal.proposed_by, proposal.decided_at) == (olga, None)
    assert [d.provenance["action"] for d in decisions_on(email)] == ["propose_retry"]
    assert ReviewItem.objects.get(effect=email).resolved_at is None

    own = post_decision(signed_in(olga), email, "approve")
    assert own.status_code == 409
    email.refresh_from_db()
    assert email.status == "unknown"

    confirmed = post_decision(signed_in(otto), email, "approve")
    assert confirmed.status_code == 302
    email.refresh_from_db()
    assert email.status == "planned"
    proposal.refresh_from_db()
    assert (proposal.decided_by, proposal.outcome) == (otto, "confirmed")
    last = decisions_on(email)[-1]
    assert (last.provenance["action"], last.provenance["ground"]) == (
        "approve",
        "operator_verified_absent",
    )
    assert ReviewItem.objects.get(effect=email).resolved_by == otto


def test_a_rejected_retry_proposal_leaves_the_effect_unknown_for_review(olga, otto, unsafe_unknown):
    email = unsafe_unknown
    post_decision(signed_in(olga), email, "retry", verified_absent="on", evidence="no delivery")

    assert post_decision(signed_in(otto), email, "reject").status_code == 302

    email.refresh_from_db()
    assert email.status == "unknown"
    assert RetryProposal.objects.get(effect=email).outcome == "rejected"
    assert ReviewItem.objects.get(effect=email).resolved_at is None
    # The proposal is settled: a new one may be made.
    again = post_decision(
        signed_in(olga), email, "retry", verified_absent="on", evidence="checked again"
    )
    assert again.status_code == 302
    assert RetryProposal.objects.filter(effect=email, decided_at__isnull=True).count() == 1


def test_a_second_proposal_while_one_waits_is_refused(olga, otto, unsafe_unknown):
    email = unsafe_unknown
    post_decision(signed_in(olga), email, "retry", verified_absent="on", evidence="no delivery")

    second = post_decision(
        signed_in(otto), email, "retry", verified_absent="on", evidence="no delivery"
    )

    assert second.status_code == 409
    assert RetryProposal.objects.filter(effect=email).count() == 1


def test_a_safe_retry_needs_no_second_operator(olga, make_effect):
    read = make_effect("unknown", tool="get_balance", attempt=1)
    assert post_decision(signed_in(olga), read, "retry").status_code == 302
    read.refresh_from_db()
    assert read.status == "planned"
    assert not RetryProposal.objects.filter(effect=read).exists()


# --- declaring it -----------------------------------------------------------------------------


def _toolfile(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "tools.toml"
    path.write_text('[tools.pay]\npreset = "idempotent"\nkey_ttl = "24h"\n' + body)
    return path


def test_loadtools_refuses_approve_above_without_an_amount_limit(db, tmp_path):
    path = _toolfile(
        tmp_path, 'amount_path = "amount"\ncurrency_path = "currency"\napprove_above = "10"\n'
    )
    with pytest.raises(ToolFileError, match="approve_above needs limit_amount_per_day"):
        load(path)
    assert not Tool.objects.filter(name="pay").exists()


def test_loadtools_refuses_a_float_threshold_and_stores_an_exact_one(db, tmp_path):
    limit = 'amount_path = "amount"\ncurrency_path = "currency"\n'
    limit += 'limit_amount_per_day = { EUR = "5000" }\n'
    with pytest.raises(ToolFileError, match="approve_above"):
        load(_toolfile(tmp_path, limit + "approve_above = 0.1\n"))
    load(_toolfile(tmp_path, limit + 'approve_above = "1000.05"\n'))
    assert Tool.objects.get(name="pay").approve_above == Decimal("1000.05")


def test_loadtools_refuses_approve_above_without_amount_paths(db, tmp_path):
    path = _toolfile(tmp_path, 'limit_amount_per_day = { EUR = "5000" }\napprove_above = "10"\n')
    with pytest.raises(ToolFileError, match="amount_path"):
        load(path)


def test_the_approval_item_is_due_within_the_tools_resolve_window(alice, four_eyes):
    four_eyes.resolve_within = timedelta(hours=2)
    four_eyes.save()
    effect = held(alice)
    item = ReviewItem.objects.get(effect=effect)
    assert timedelta(hours=1, minutes=59) < item.due_at - item.opened_at <= timedelta(hours=2)


def test_a_proposal_made_before_the_effect_moved_is_never_carried_out(olga, otto, unsafe_unknown):
    email = unsafe_unknown
    post_decision(signed_in(olga), email, "retry", verified_absent="on", evidence="no delivery")
    # Meanwhile the effect went round again: retried by a proof of non-receipt, lost again.
    email.refresh_from_db()
    for status in (Status.PLANNED, Status.DISPATCHING, Status.UNKNOWN):
        email = transition(email, status, actor="test")

    stale = post_decision(signed_in(otto), email, "approve")

    assert stale.status_code == 409
    email.refresh_from_db()
    assert email.status == "unknown"
    fresh = post_decision(signed_in(otto), email, "retry", verified_absent="on", evidence="again")
    assert fresh.status_code == 302
    proposals = RetryProposal.objects.filter(effect=email)
    outcomes = dict(proposals.values_list("proposed_by", "outcome"))
    assert outcomes == {olga.pk: "superseded", otto.pk: ""}


def test_in_restore_mode_an_approved_effect_is_looked_up_before_it_can_be_claimed(
    alice, four_eyes, olga, django_capture_on_commit_callbacks
):
    """Its approval, and what followed, may be among what the lost branch held: posted again,
    it is looked up like any new intent of a tool without keys, approval first."""
    four_eyes.honours_key = False
    four_eyes.save()
    mode.begin(lost_since=timezone.now() - timedelta(minutes=5), reason="restored", by="shell:t")
    effect = held(alice)  # four-eyes still goes first
    page = signed_in(olga).get(f"/effects/{effect.id}/").content.decode()
    assert "Restore mode is on: the effect becomes unknown" in page

    with django_capture_on_commit_callbacks(execute=True):
        assert post_decision(signed_in(olga), effect, "approve").status_code == 302

    effect.refresh_from_db()
    assert effect.status == "unknown" and effect.next_check_at is not None
    item = ReviewItem.objects.get(effect=effect, resolved_at__isnull=True)
    assert item.reason == Reason.RESTORED_GAP
    refused = alice.post(f"/effects/{effect.id}/claim", {"owner": "worker-1"})
    assert assert_error(refused, 409, "invalid_transition")["status"] == "unknown"
