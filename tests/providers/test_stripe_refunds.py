"""The Stripe adapter's other abilities against the sandbox's Stripe face: refunds the ledger
sends under the effect's key (a lost answer unknown, a refusal failed, a 429 not sent),
window listings for restore mode (every page, each record with the key it carried), and what
loadtools refuses of a Stripe tool."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from devstack.providers.stripe import caller
from ledger.models import Incident, StatementLine, Tool
from ledger.policy.toolfile import ToolFileError
from ledger.restore import gap, mode
from reconcilers import gapsweep
from reconcilers.providers import adapter_for
from reconcilers.providers.outcomes import ListingBroken
from tests.providers.stripe_support import (
    CHARGE,
    REFUND_TOOL,
    TARGET,
    TOOL,
    declare,
    objects,
    pay,
    stripe_settings,
)

pytest_plugins = ["tests.providers.stripe_support"]
pytestmark = pytest.mark.django_db


@pytest.fixture
def paid(stripe_sandbox, make_payment) -> str:
    """A confirmed payment of 10.99 EUR at the face: its PaymentIntent's id."""
    return pay(stripe_sandbox, make_payment("confirmed"))["provider_ref"]


def refund_of(make_payment, paid: str, **asked) -> object:
    request = {"charge": paid, "amount": "4.00", **asked}
    return make_payment("dispatching", tool=REFUND_TOOL, request=request)


# --- refunds the ledger sends -------------------------------------------------------------------


def test_a_refund_goes_out_once_under_the_effects_key(
    stripe_sandbox, refund_tool, make_payment, paid
):
    effect = refund_of(make_payment, paid)

    sent = adapter_for(refund_tool).execute(effect)
    again = adapter_for(refund_tool).execute(effect)
    found = adapter_for(refund_tool).lookup(effect)

    assert sent.status == "confirmed" and sent.provider_ref.startswith("re_")
    assert again.provider_ref == sent.provider_ref  # Stripe's replay of the same key
    (refund,) = objects(stripe_sandbox, "refund")
    assert (refund["amount"], refund["payment_intent"]) == (400, paid)
    assert refund["metadata"] == {
        "ledger_key": effect.idempotency_key,
        "ledger_effect": str(effect.id),
    }
    assert (found.outcome, found.status, found.provider_ref) == (
        "found",
        "confirmed",
        sent.provider_ref,
    )
    assert found.mismatches == ()


def test_a_lost_answer_is_unknown_and_the_refund_is_found(
    stripe_sandbox, refund_tool, make_payment, paid
):
    effect = refund_of(make_payment, paid)
    stripe_sandbox.set_faults(drop=True, methods=("POST",))

    sent = adapter_for(refund_tool).execute(effect)
    stripe_sandbox.clear_faults()

    assert sent.status == "unknown"
    answer = adapter_for(refund_tool).lookup(effect)
    assert (
        answer.outcome == "found"
        and answer.provider_ref == objects(stripe_sandbox, "refund")[0]["id"]
    )


def test_a_refusal_fails_and_a_rate_limit_leaves_it_unsent(
    stripe_sandbox, refund_tool, make_payment, paid
):
    too_much = refund_of(make_payment, paid, amount="11.00")
    later = refund_of(make_payment, paid, currency="EUR")
    stripe_settings(stripe_sandbox, rate_limit=1)

    limited = adapter_for(refund_tool).execute(later)
    refused = adapter_for(refund_tool).execute(too_much)
    nothing = adapter_for(refund_tool).execute(refund_of(make_payment, "in_not_a_payment"))

    assert limited.status == "not_sent"
    assert refused.status == "failed" and "amount_too_large" in refused.error["detail"]
    assert nothing.status == "failed"
    assert objects(stripe_sandbox, "refund") == []


# --- windows, for restore mode ------------------------------------------------------------------


def test_a_window_lists_every_payment_and_refund_page_by_page(
    stripe_sandbox, stripe_tool, refund_tool, make_payment, paid, tmp_path
):
    start = timezone.now() - timedelta(seconds=5)
    charges = [pay(stripe_sandbox, make_payment())["provider_ref"] for _ in range(4)]
    refund = refund_of(make_payment, paid)
    sent = adapter_for(refund_tool).execute(refund)
    paged = declare(tmp_path, stripe_sandbox.url, config={"page_size": 2})

    listing = adapter_for(paged).list_window(start, timezone.now() + timedelta(seconds=1))
    records = list(listing.records)
    stripe_sandbox.set_faults(fail5xx=503, methods=("GET",))
    broken = adapter_for(paged).list_window(start, timezone.now())

    assert listing.complete, listing.detail
    by_ref = {record.provider_ref: record for record in records}
    assert set(by_ref) == {paid, *charges, sent.provider_ref}
    (refunded,) = [r for r in records if r.type == "refund"]
    assert (refunded.reference, refunded.amount_minor, refunded.currency) == (
        refund.idempotency_key,
        400,
        "EUR",
    )
    assert {r.status for r in records} == {"succeeded"}
    # A page Stripe does not hand over stops the listing: nothing in the window is concluded.
    with pytest.raises(ListingBroken, match="payment_intents: Stripe answered 503"):
        list(broken.records)


def test_a_windows_pages_are_fetched_as_the_records_before_them_are_read(
    stripe_sandbox, make_payment, tmp_path
):
    """The listing holds one page at a time: the first page is read before Stripe fails, and
    the failure shows only when the next page is wanted."""
    start = timezone.now() - timedelta(seconds=5)
    for _ in range(5):
        pay(stripe_sandbox, make_payment())
    paged = declare(tmp_path, stripe_sandbox.url, config={"page_size": 2})

    listing = adapter_for(paged).list_window(start, timezone.now() + timedelta(seconds=1))
    records = iter(listing.records)
    first_page = [next(records), next(records)]
    stripe_sandbox.set_faults(fail5xx=503, methods=("GET",))

    assert listing.complete and len({r.provider_ref for r in first_page}) == 2
    with pytest.raises(ListingBroken, match="503"):
        next(records)


def test_a_window_longer_than_its_page_bound_is_not_complete(
    stripe_sandbox, make_payment, tmp_path
):
    start = timezone.now() - timedelta(seconds=5)
    for _ in range(3):
        pay(stripe_sandbox, make_payment())
    bounded = declare(tmp_path, stripe_sandbox.url, config={"page_size": 1, "window_max_pages": 2})

    listing = adapter_for(bounded).list_window(start, timezone.now() + timedelta(seconds=1))

    with pytest.raises(ListingBroken, match="more than 2 pages of payment_intents"):
        list(listing.records)


@pytest.mark.django_db(transaction=True)
def test_restore_mode_accounts_for_the_window_from_stripes_lists(
    stripe_sandbox, stripe_tool, make_payment, settings, tools
):
    settings.LEDGER_MAX_LEASE_SECONDS = 1
    for tool in Tool.objects.all():
        tool.settle_after, tool.statement_skew = timedelta(seconds=1), timedelta(0)
        tool.save()
    ours = make_payment("confirmed")
    pay(stripe_sandbox, ours)
    # A payment under a key the restored database never saw.
    lost = {"idempotency_key": "a-key-the-ledger-lost", "id": "lost", "target": TARGET}
    caller.send(stripe_sandbox.url, lost, CHARGE, "")
    mode.begin(lost_since=timezone.now() - timedelta(minutes=5), reason="PITR", by="shell:t")
    end = gap.statement_bounds(mode.current(), Tool.objects.get(name=TOOL))[1]
    time.sleep(max(0.0, (end - timezone.now()).total_seconds()) + 0.05)

    swept = gapsweep.run()

    assert swept[TOOL] == {"records": 2, "matched": 1, "incidents": 1}
    (incident,) = Incident.objects.all()
    assert incident.line.reference == "a-key-the-ledger-lost"
    assert StatementLine.objects.get(reference=ours.idempotency_key).effect_id == ours.pk


# --- what loadtools refuses ---------------------------------------------------------------------


def test_the_crash_tests_tool_is_accepted_and_what_stripe_cannot_back_is_refused(tmp_path, tools):
    tool = declare(tmp_path, "http://127.0.0.1:9")
    assert (tool.honours_key, tool.key_ttl, tool.lookup_proves_absence) == (
        True,
        timedelta(hours=24),
        True,
    )
    refusals = {
        "key_ttl": {"key_ttl": "48h"},
        "a secret is never written here": {"config": {"api_key": "sk_test_inline"}},
        "api_key_env must name": {"config": {"api_key_env": {"live": "ONLY_LIVE"}}},
        "base_url must be": {"config": {"base_url": "api.stripe.com"}},
        "page_size must be": {"config": {"page_size": 500}},
    }
    for said, changes in refusals.items():
        with pytest.raises(ToolFileError, match=said):
            declare(tmp_path, "http://127.0.0.1:9", "refused_tool", **changes)
    assert not Tool.objects.filter(name="refused_tool").exists()
