"""Compensations decided in restore mode start in doubt when their tool cannot deduplicate them:
a refund decided again after a restore gets the key the lost one had, which protects only a
provider that honours keys. Reconciliation looks it up by key first: found, it is confirmed and
never sent; proven absent (once the lost branch's leases have run out), the ledger sends it.

The provider is the payments sandbox in `--reference-only` mode: it keeps our key as a
reference and lists every record under it, but a second POST with the key refunds again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.effects.compensation import compensate
from ledger.models import Effect, RestoreWindow, ReviewItem
from ledger.restore import mode
from reconcilers import execution
from reconcilers.execution import execute_one, redrive_executions
from reconcilers.reconcile import process_one
from tests.factories import charge, refund

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"amount": "12.00", "currency": "EUR", "account": "acct_7"}


@pytest.fixture
def keyless(start_sandbox, tools):
    """charge_card and refund_card at a provider that does not deduplicate by key but whose
    search by our reference is complete (`lookup_proves_absence`)."""
    provider = start_sandbox("payments", "--reference-only")
    for name in ("charge_card", "refund_card"):
        tool = tools[name]
        tool.reconciler_config = {"base_url": provider.url, "timeout": 2}
        tool.honours_key, tool.key_ttl = False, None
        tool.lookup_proves_absence, tool.lookup_horizon = True, timedelta(days=1)
        tool.call_timeout = tool.search_lag = timedelta(seconds=30)
        tool.settle_after = timedelta(minutes=2)
        tool.save()
    return provider


@pytest.fixture
def woken(monkeypatch):
    """The compensations the reconciler wakes for sending (instead of Redis)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(execution, "_enqueue", lambda ids: calls.append(ids) or True)
    return calls


def refund_decided_in_restore_mode(alice, provider, make_effect) -> Effect:
    made = charge(provider, "charge-key", BODY).json()
    parent = make_effect("confirmed", provider_ref=made["id"], request=BODY, target="acct_7")
    mode.begin(lost_since=timezone.now() - timedelta(minutes=10), reason="PITR", by="shell:t")
    effect, created = compensate(
        alice.agent, parent, tool="refund_card", request={"charge": made["id"], "amount": "12.00"},
        reason="refund decided again", compensation_key=None, actor="user:olga", operator=True,
    )  # fmt: skip
    assert created
    return effect


def lost_leases_run_out(settings) -> None:
    """The window began five minutes ago and leases were capped at a second: the lost
    branch's last request has had time to land, and settle_after too."""
    settings.LEDGER_MAX_LEASE_SECONDS = 1
    RestoreWindow.objects.filter(ended_at__isnull=True).update(
        started_at=timezone.now() - timedelta(minutes=5)
    )


def test_a_refund_decided_in_restore_mode_starts_in_doubt_and_is_not_sent(
    alice, keyless, make_effect
):
    effect = refund_decided_in_restore_mode(alice, keyless, make_effect)
    assert (effect.status, effect.requested_by) == ("unknown", "operator")
    assert effect.next_check_at is not None
    assert ReviewItem.objects.get(effect=effect, resolved_at__isnull=True).reason == "restored_gap"
    assert execute_one(effect.id) is False
    assert redrive_executions() == 0
    assert [t["object"] for t in keyless.transactions()] == ["charge"]


def test_a_not_found_before_the_lost_branch_could_have_sent_it_proves_nothing(
    alice, keyless, make_effect
):
    effect = refund_decided_in_restore_mode(alice, keyless, make_effect)
    assert process_one(effect.id) is True
    after = Effect.objects.get(pk=effect.pk)
    assert after.status == "unknown"
    # Looked up again once a lease taken on the lost branch (an hour) and settle_after are over.
    started = RestoreWindow.objects.get().started_at
    assert after.next_check_at >= started + timedelta(hours=1, minutes=2)


def test_proven_absent_it_goes_back_to_planned_and_the_ledger_sends_it(
    alice, keyless, make_effect, settings, woken
):
    effect = refund_decided_in_restore_mode(alice, keyless, make_effect)
    lost_leases_run_out(settings)

    assert process_one(effect.id) is True

    after = Effect.objects.get(pk=effect.pk)
    assert after.status == "planned"
    moved = after.events.filter(kind="transition", to_status="planned").get()
    assert (moved.reason, moved.data["proof"]) == ("never_received", "complete_lookup")
    assert woken == [[str(effect.id)]]  # sent at once, after the commit
    assert redrive_executions() == 1  # and re-driven by the sweep if that wake-up is lost
    assert execute_one(effect.id) is True
    assert Effect.objects.get(pk=effect.pk).status == "confirmed"
    assert [t["object"] for t in keyless.transactions()] == ["charge", "refund"]


def test_found_at_the_provider_it_is_confirmed_and_never_sent_again(
    alice, keyless, make_effect, settings, woken
):
    effect = refund_decided_in_restore_mode(alice, keyless, make_effect)
    # The refund the lost branch sent, under the same derived key.
    charge_id = effect.request["charge"]
    lost = refund(keyless, effect.idempotency_key, {"charge": charge_id, "amount": "12.00"})
    assert lost.status_code in (200, 201), lost.text

    assert process_one(effect.id) is True

    after = Effect.objects.get(pk=effect.pk)
    assert after.status == "confirmed" and after.provider_ref == lost.json()["id"]
    assert woken == []
    assert execute_one(effect.id) is False
    assert [t["object"] for t in keyless.transactions()] == ["charge", "refund"]


def test_an_agents_compensation_starts_in_doubt_too(alice, keyless, tools):
    made = alice.intent("run-c", "charge", tool="charge_card", target="acct_7", request=BODY)
    token = alice.claim(made["id"])["lease_token"]
    alice.outcome(made["id"], token, "confirmed", provider_ref="ch_agent")
    mode.begin(lost_since=timezone.now() - timedelta(minutes=10), reason="PITR", by="shell:t")
    response = alice.post(
        f"/effects/{made['id']}/compensate",
        {"request": {"charge": "ch_agent", "amount": "12.00"}, "compensation_key": "k1"},
    )
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "unknown"


def test_a_refund_whose_provider_honours_keys_starts_planned(alice, provider, make_effect):
    effect = refund_decided_in_restore_mode(alice, provider, make_effect)
    assert effect.status == "planned"
