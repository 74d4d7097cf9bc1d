"""/metrics stays bounded whatever tool names agents make up: every tool nobody declared shares
one `tool` label value, in the gauges and in the counters."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger.observability.metrics import UNDECLARED
from ledger.overview.summary import summary
from reconcilers.reconcile import process_one

TOKEN = "metrics-token-for-tests-0123456789"


@pytest.fixture
def scrape(settings):
    """GET /metrics as a scraper does, read afresh: its lines."""
    settings.LEDGER_METRICS_TOKEN = TOKEN

    def get() -> list[str]:
        summary.expire()
        response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200
        return response.content.decode().splitlines()

    yield get
    summary.expire()


def test_two_hundred_made_up_tool_names_add_one_series_not_two_hundred(alice, scrape):
    alice.intent(step_id="declared")  # charge_card, declared in tools.toml
    before = scrape()
    for n in range(200):
        alice.intent(step_id=f"s{n}", tool=f"made-up-{n}")

    after = scrape()

    assert not [line for line in after if "made-up-" in line]
    grown = set(after) - set(before)
    assert len(after) - len(before) <= 2  # the one undeclared series, and its HELP text at most
    assert f'ledger_effects{{status="planned",tool="{UNDECLARED}"}} 200.0' in grown
    assert 'ledger_effects{status="planned",tool="charge_card"} 1.0' in after


def test_reconciliations_of_undeclared_tools_are_counted_under_one_label(
    alice, scrape, django_capture_on_commit_callbacks
):
    def reconciled_undeclared(lines: list[str]) -> float:
        series = f'ledger_reconciliations_total{{outcome="no_lookup",tool="{UNDECLARED}"}} '
        found = [line for line in lines if line.startswith(series)]
        return float(found[0].removeprefix(series)) if found else 0.0

    before = reconciled_undeclared(scrape())
    for n in range(3):
        effect = alice.intent(step_id=f"r{n}", tool=f"invented-{n}", claim=True)
        alice.outcome(effect["id"], effect["lease_token"], "unknown")
        with django_capture_on_commit_callbacks(execute=True):
            assert process_one(effect["id"]) is True

    after = scrape()
    assert reconciled_undeclared(after) - before == 3
    assert not [line for line in after if "invented-" in line]
