"""Restore mode accounts for the lost window: the payments sandbox (a real process) lists what it
did in the window, every record is matched to an effect or raised as an incident, and the mode
does not end by itself before every tool that can list the window has been swept and every tool
settled by statements has a final statement covering it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import (
    Alert,
    AlertKind,
    Effect,
    Incident,
    StatementImport,
    StatementLine,
    Tool,
)
from ledger.models.statements import Origin
from ledger.restore import gap, mode
from reconcilers import gapsweep
from reconcilers.providers import adapter_for
from reconcilers.providers.outcomes import ListingBroken
from tests.factories import charge

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"amount": "12.00", "currency": "EUR", "account": "acct_7"}


@pytest.fixture(autouse=True)
def short_reach(settings, tools):
    """The lost branch's reach (the longest lease, settle_after and the statement skew after
    the mode's start), short enough to pass within a test: the sweep lists a window only once
    nothing sent on the lost branch can still arrive in it."""
    settings.LEDGER_MAX_LEASE_SECONDS = 1
    for tool in tools.values():  # the objects other fixtures save again
        tool.settle_after, tool.statement_skew = timedelta(seconds=1), timedelta(0)
        tool.save()


def _begin() -> None:
    mode.begin(lost_since=timezone.now() - timedelta(minutes=5), reason="PITR", by="shell:t")


def _past_reach() -> None:
    """Wait until every tool's reach of the open window has passed."""
    window = mode.current()
    end = max(gap.statement_bounds(window, tool)[1] for tool in Tool.objects.all())
    wait = (end - timezone.now()).total_seconds()
    assert wait < 5
    time.sleep(max(0.0, wait) + 0.05)


def test_the_payments_adapter_lists_a_window_page_by_page(provider, tools):
    for n in range(130):
        assert charge(provider, f"key-{n}", BODY).status_code == 201
    listing = adapter_for(tools["charge_card"]).list_window(
        timezone.now() - timedelta(minutes=1), timezone.now() + timedelta(seconds=2)
    )
    assert listing.complete, listing.detail
    records = list(listing.records)  # streamed: the pages are fetched as it is read
    assert len(records) == 130  # two pages of charges, none of refunds
    assert {r.reference for r in records} == {f"key-{n}" for n in range(130)}
    assert {(r.amount_minor, r.currency, r.type) for r in records} == {(1200, "EUR", "charge")}
    later = adapter_for(tools["charge_card"]).list_window(
        timezone.now() + timedelta(minutes=1), timezone.now() + timedelta(minutes=2)
    )
    assert later.complete and list(later.records) == []


def test_every_record_of_the_window_is_matched_or_raised_as_an_incident(provider, tools, alice):
    ours = alice.intent("run-g", "charge", tool="charge_card", target="acct_7", request=BODY)
    key = Effect.objects.get(pk=ours["id"]).idempotency_key
    assert charge(provider, key, BODY).status_code == 201  # the effect's own charge
    assert charge(provider, "a-key-the-ledger-lost", BODY).status_code == 201
    _begin()
    window = mode.current()
    assert "charge_card" in gap.unswept(window) or gap.unswept(window)
    # Not before the reach has passed: a copy sent late on the lost branch would be missed.
    assert "waiting until" in gapsweep.run()["charge_card"]
    _past_reach()

    swept = gapsweep.run()

    assert swept["charge_card"] == {"records": 2, "matched": 1, "incidents": 1}
    (incident,) = Incident.objects.all()
    assert incident.line.reference == "a-key-the-ledger-lost"
    assert incident.line.statement.origin == Origin.SWEEP and incident.line.statement.provisional
    assert (
        StatementLine.objects.get(reference=key).effect_id == Effect.objects.get(pk=ours["id"]).pk
    )
    assert Alert.objects.filter(kind=AlertKind.INCIDENT_OPENED).count() == 1
    # Once per window and tool: a second run changes nothing.
    assert "charge_card" not in gapsweep.run()
    assert Incident.objects.count() == 1
    assert "charge_card" not in gap.unswept(mode.current())


def test_an_incomplete_listing_is_tried_again_and_keeps_the_mode_on(provider, tools):
    charge(provider, "k1", BODY)
    _begin()
    _past_reach()
    provider.set_faults(fail5xx=500, methods=("GET",))
    assert "incomplete" in gapsweep.run()["charge_card"]
    assert "charge_card" in gap.unswept(mode.current())
    assert mode.end_if_checked() is None
    provider.clear_faults()
    assert gapsweep.run()["charge_card"]["incidents"] == 1


def test_without_keys_a_record_is_matched_by_the_reference_an_outcome_reported(
    start_sandbox, tools, make_effect
):
    keyless = start_sandbox("payments", "--ignore-keys")
    tools["charge_card"].reconciler_config = {"base_url": keyless.url}
    tools["charge_card"].save()
    made = charge(keyless, None, BODY).json()
    charge(keyless, None, BODY)  # nothing in the ledger names this one
    make_effect("confirmed", provider_ref=made["id"])
    _begin()
    _past_reach()
    assert gapsweep.run()["charge_card"] == {"records": 2, "matched": 1, "incidents": 1}


def test_the_mode_waits_for_sweeps_and_for_statements_covering_the_window(
    provider, tools, stmt_tool
):
    # One provider serves the charge and its refund: both tools list it, one incident each.
    tools["refund_card"].reconciler_config = {"base_url": provider.url}
    tools["refund_card"].save()
    charge(provider, "a-key-the-ledger-lost", BODY)
    _begin()
    window = mode.current()
    assert gap.unswept(window) == ["(the sweep has not run yet)"]
    assert mode.end_if_checked() is None
    _past_reach()
    swept = gapsweep.run()
    assert set(swept) == {"charge_card", "refund_card"}, swept  # create_ticket: no window_url
    assert Incident.objects.count() == 1
    assert gap.unswept(mode.current()) == []
    # A tool settled by statements: a final one imported before, none covering the window.
    StatementImport.objects.create(
        tool=stmt_tool.name, filename="old.csv", sha256="0" * 64,
        period_start=timezone.now() - timedelta(days=3),
        period_end=timezone.now() - timedelta(days=2),
        origin=Origin.COMMAND, imported_by="shell:t",
    )  # fmt: skip
    assert gap.statements_missing(mode.current()) == [stmt_tool.name]
    assert mode.end_if_checked() is None
    # Up to the mode's start only: a lease taken on the lost branch may still have been used
    # for the longest lease after it (and settle_after and the skew on top).
    now = window.started_at
    StatementImport.objects.create(
        tool=stmt_tool.name, filename="window.csv", sha256="1" * 64,
        period_start=now - timedelta(days=1), period_end=now,
        origin=Origin.COMMAND, imported_by="shell:t",
    )  # fmt: skip
    assert gap.statements_missing(mode.current()) == [stmt_tool.name]
    StatementImport.objects.create(
        tool=stmt_tool.name, filename="after.csv", sha256="2" * 64,
        period_start=now, period_end=now + timedelta(hours=2),
        origin=Origin.COMMAND, imported_by="shell:t",
    )  # fmt: skip
    assert gap.statements_missing(mode.current()) == []
    ended = mode.end_if_checked()
    assert ended is not None and "accounted for" in ended.end_reason


def test_an_incident_closes_by_itself_once_an_effect_posted_again_names_its_record(
    provider, tools, make_effect
):
    made = charge(provider, "a-key-the-ledger-lost", BODY).json()
    _begin()
    _past_reach()
    assert gapsweep.run()["charge_card"]["incidents"] == 1
    incident = Incident.objects.get()
    assert incident.acknowledged_at is None
    assert "incidents closed" not in gapsweep.run()  # nothing names it yet
    # The agent posted its run again and reported the provider's reference.
    effect = make_effect("confirmed", provider_ref=made["id"])

    assert gapsweep.run()["incidents closed"] == 1

    incident.refresh_from_db()
    assert incident.acknowledged_at is not None and incident.decision_id is not None
    assert str(effect.pk) in incident.note and incident.acknowledged_by is None
    assert Effect.objects.get(pk=incident.decision_id).provenance["actor"] == "system:restore"
    assert "incidents closed" not in gapsweep.run()


def test_a_listing_streamed_page_by_page_that_breaks_half_way_leaves_nothing(
    provider, tools, monkeypatch
):
    for n in range(250):  # three pages of charges
        assert charge(provider, f"lost-{n}", BODY).status_code == 201
    _begin()
    _past_reach()
    window, tool = mode.current(), Tool.objects.get(name="charge_card")
    start, end = gap.statement_bounds(window, tool)
    listing = adapter_for(tool).list_window(start, end)
    monkeypatch.setattr(gap, "CHUNK", 50)  # batches stored before the listing breaks

    def read_then_break():
        for n, record in enumerate(listing.records):
            if n == 150:  # the second page is in; the third will be refused
                provider.set_faults(fail5xx=500, methods=("GET",))
            yield record

    with pytest.raises(ListingBroken, match="charges: the provider answered 500"):
        gap.account_for(window, tool, start, end, read_then_break())

    assert not StatementImport.objects.filter(origin=Origin.SWEEP).exists()
    assert not StatementLine.objects.exists() and not Incident.objects.exists()
    assert "charge_card" not in mode.current().applied.get("swept", {})
    provider.clear_faults()
    assert gapsweep.run()["charge_card"] == {"records": 250, "matched": 0, "incidents": 250}
    assert StatementLine.objects.count() == 250 == Incident.objects.count()
