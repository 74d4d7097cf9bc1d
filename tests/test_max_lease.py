"""LEDGER_MAX_LEASE_SECONDS: the agent API's bound on lease_seconds, and so how far restore mode
reaches back before the loss and forward from its start
(`ledger.rules.restore_state.longest_lease`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from config.env import env_int
from ledger.models import Effect, RestoreWindow, StatementImport
from ledger.models.statements import Origin
from ledger.restore import gap, mode
from ledger.rules.restore_state import longest_lease
from reconcilers import gapsweep
from tests.helpers import assert_error

pytestmark = pytest.mark.django_db(transaction=True)

INTENT = {"run_id": "run-l", "step_id": "s", "tool": "charge_card", "target": "acct_1",
          "request": {"amount": "1.00"}}  # fmt: skip


@pytest.fixture
def capped(settings):
    settings.LEDGER_MAX_LEASE_SECONDS = 300
    return 300


@pytest.mark.parametrize("raw", ["0", "3601", "-1", "an hour"])
def test_a_bound_out_of_range_is_refused_at_start(monkeypatch, raw):
    monkeypatch.setenv("LEDGER_MAX_LEASE_SECONDS", raw)
    with pytest.raises(ImproperlyConfigured, match="LEDGER_MAX_LEASE_SECONDS"):
        env_int("LEDGER_MAX_LEASE_SECONDS", 3600, minimum=1, maximum=3600)


def test_the_bound_defaults_to_an_hour(settings):
    assert settings.LEDGER_MAX_LEASE_SECONDS == 3600
    assert longest_lease() == timedelta(hours=1)


def refused_naming_the_bound(response) -> None:
    body = assert_error(response, 422, "validation_error")
    assert "300" in body["fields"]["lease_seconds"], body
    assert "LEDGER_MAX_LEASE_SECONDS" in body["fields"]["lease_seconds"], body


def test_a_lease_above_the_bound_is_refused_on_claim_intent_and_heartbeat(alice, capped):
    refused_naming_the_bound(alice.post("/effects", {**INTENT, "claim": True,
                                                     "lease_seconds": 301}))  # fmt: skip
    assert not Effect.objects.exists()
    effect = alice.intent(**{**INTENT, "step_id": "s2"})
    refused_naming_the_bound(alice.post(f"/effects/{effect['id']}/claim", {"lease_seconds": 301}))
    held = alice.claim(effect["id"], lease_seconds=300)
    assert held["lease_seconds"] == 300
    response = alice.post(
        f"/effects/{effect['id']}/heartbeat",
        {"lease_token": held["lease_token"], "lease_seconds": 301},
    )
    refused_naming_the_bound(response)
    response = alice.post(
        f"/effects/{effect['id']}/heartbeat",
        {"lease_token": held["lease_token"], "lease_seconds": 300},
    )
    assert response.status_code == 200, response.content


def test_the_static_bound_still_holds_with_the_default(alice):
    body = assert_error(
        alice.post("/effects", {**INTENT, "claim": True, "lease_seconds": 3601}),
        422,
        "validation_error",
    )
    assert "lease_seconds" in body["fields"]


def test_a_capped_lease_shortens_how_far_restore_mode_reaches_back(make_effect, capped):
    assert longest_lease() == timedelta(seconds=300)
    recent, older = make_effect("planned"), make_effect("planned")
    Effect.objects.filter(pk=recent.pk).update(updated_at=timezone.now() - timedelta(minutes=9))
    Effect.objects.filter(pk=older.pk).update(updated_at=timezone.now() - timedelta(minutes=11))
    lost = timezone.now() - timedelta(minutes=5)
    window = mode.begin(lost_since=lost, reason="PITR", by="shell:t").window
    # lost_since less five minutes, not less an hour.
    assert Effect.objects.get(pk=recent.pk).status == "unknown"
    assert Effect.objects.get(pk=older.pk).status == "planned"
    assert window.applied["in_doubt"] == 1


def test_statements_must_cover_the_window_the_capped_lease_gives(stmt_tool, capped):
    lost = timezone.now() - timedelta(minutes=20)
    window = mode.begin(lost_since=lost, reason="PITR", by="shell:t").window
    settle, skew = timedelta(minutes=2), timedelta(minutes=5)  # the defaults
    start = lost - timedelta(seconds=300) - skew
    end = window.started_at + timedelta(seconds=300) + settle + skew

    def final(name: str, period_start, period_end) -> None:
        StatementImport.objects.create(
            tool=stmt_tool.name, filename=name, sha256=name[0] * 64, period_start=period_start,
            period_end=period_end, origin=Origin.COMMAND, imported_by="shell:t",
        )  # fmt: skip

    final("a.csv", start + timedelta(seconds=1), end)
    assert gap.statements_missing(window) == [stmt_tool.name]  # starts a second late
    StatementImport.objects.filter(filename="a.csv").delete()
    final("b.csv", start, end - timedelta(seconds=1))
    assert gap.statements_missing(window) == [stmt_tool.name]  # ends a second early
    final("c.csv", end - timedelta(seconds=1), end)
    assert gap.statements_missing(window) == []


def test_the_sweep_lists_the_capped_reach_once_it_has_passed(provider, tools, capped):
    tool = tools["charge_card"]
    tool.settle_after, tool.statement_skew = timedelta(seconds=1), timedelta(0)
    tool.save()
    lost = timezone.now() - timedelta(minutes=1)
    window = mode.begin(lost_since=lost, reason="PITR", by="shell:t").window
    # Until the mode's start plus the capped lease and settle_after: a late send may still come.
    reach_end = window.started_at + timedelta(seconds=capped + 1)
    assert gapsweep.run()["charge_card"] == {"waiting until": reach_end.isoformat()}
    assert not StatementImport.objects.filter(origin=Origin.SWEEP).exists()

    # The same window entered long enough ago: listed from lost_since less the capped lease.
    earlier = timedelta(seconds=capped + 60)
    RestoreWindow.objects.filter(pk=window.pk).update(
        lost_since=lost - earlier, started_at=window.started_at - earlier
    )
    gapsweep.run()
    swept = StatementImport.objects.get(origin=Origin.SWEEP, tool="charge_card")
    assert swept.period_start == lost - earlier - timedelta(seconds=capped)
    assert swept.period_end == reach_end - earlier
