"""/metrics: who may scrape, what the counters count, and gauges that come from a summary.

In one process (no PROMETHEUS_MULTIPROC_DIR): counters are process-wide, so each test compares
before and after. The multi-worker case is tests/test_metrics_gunicorn.py.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ledger.effects.transitions import transition
from ledger.models import Alert, Effect, Reason
from ledger.models.states import Status
from ledger.overview.summary import summary
from ledger.rules.reviewqueue import open_review
from reconcilers.reconcile import process_one

TOKEN = "metrics-token-for-tests-0123456789"


@pytest.fixture
def scrape(settings):
    """GET /metrics with the token; returns {(name, labels…): value} for every sample."""
    settings.LEDGER_METRICS_TOKEN = TOKEN
    settings.LEDGER_METRICS_REFRESH = 3600  # the tests expire the summary when they mean to
    summary.expire()

    def get(*, fresh: bool = True) -> dict[tuple, float]:
        if fresh:
            summary.expire()
        response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200, response.content
        assert response["Content-Type"].startswith("text/plain; version=")
        samples: dict[tuple, float] = {}
        for family in text_string_to_metric_families(response.content.decode()):
            for sample in family.samples:
                key = (sample.name, *sorted(sample.labels.items()))
                samples[key] = sample.value
        return samples

    yield get
    summary.expire()


def value(samples: dict[tuple, float], name: str, **labels: str) -> float:
    return samples.get((name, *sorted(labels.items())), 0.0)


# --- Who may scrape ------------------------------------------------------------------------


def test_without_a_configured_token_there_is_no_metrics_endpoint(settings, db):
    settings.LEDGER_METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 404
    assert Client().get("/metrics", headers={"Authorization": "Bearer "}).status_code == 404


def test_a_scrape_without_the_token_or_with_another_is_refused(settings, db, olga):
    settings.LEDGER_METRICS_TOKEN = TOKEN
    assert Client().get("/metrics").status_code == 401
    wrong = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}x"})
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    # A signed-in operator is no scraper either.
    operator = Client()
    operator.force_login(olga)
    refused = operator.get("/metrics")
    assert refused.status_code == 401
    assert b"ledger_" not in refused.content


def test_only_get_is_answered(settings, db):
    settings.LEDGER_METRICS_TOKEN = TOKEN
    response = Client().post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 405


# --- Counters ------------------------------------------------------------------------------


def test_each_committed_transition_is_counted_by_from_and_to(
    alice, scrape, django_capture_on_commit_callbacks
):
    before = scrape()
    with django_capture_on_commit_callbacks(execute=True):
        effect = alice.intent(claim=True)
        alice.outcome(effect["id"], effect["lease_token"], "confirmed")
    after = scrape()

    name = "ledger_transitions_total"
    pairs = {("planned", "dispatching"): 1, ("dispatching", "confirmed"): 1}
    for (source, target), n in pairs.items():
        labels = {"from_status": source, "to_status": target}
        assert value(after, name, **labels) - value(before, name, **labels) == n


def test_a_transition_that_rolls_back_is_not_counted(
    make_effect, scrape, django_capture_on_commit_callbacks
):
    effect = make_effect("planned")
    labels = {"from_status": "planned", "to_status": "cancelled"}
    before = value(scrape(), "ledger_transitions_total", **labels)

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        transition(effect, Status.CANCELLED, actor="test")
        raise RuntimeError("the surrounding work failed")

    assert Effect.objects.get(pk=effect.pk).status == "planned"
    assert value(scrape(), "ledger_transitions_total", **labels) == before


def test_reconciliation_outcomes_are_counted_by_tool_and_outcome(
    alice, scrape, django_capture_on_commit_callbacks
):
    effect = alice.intent(tool="send_email", request={"to": "x@example.com"}, claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    labels = {"tool": "send_email", "outcome": "no_lookup"}
    before = value(scrape(), "ledger_reconciliations_total", **labels)

    with django_capture_on_commit_callbacks(execute=True):
        assert process_one(effect["id"]) is True

    assert value(scrape(), "ledger_reconciliations_total", **labels) - before == 1


# --- Gauges from the summary ---------------------------------------------------------------


def test_effects_are_counted_by_tool_and_status(make_effect, scrape):
    make_effect("planned")
    make_effect("planned")
    make_effect("unknown", tool="send_email", attempt=1)

    samples = scrape()

    assert value(samples, "ledger_effects", tool="charge_card", status="planned") == 2
    assert value(samples, "ledger_effects", tool="send_email", status="unknown") == 1
    assert value(samples, "ledger_effects", tool="send_email", status="planned") == 0


def test_open_review_items_their_oldest_age_and_the_overdue_ones(make_effect, scrape):
    old, recent, resolved = (make_effect("unknown", attempt=1) for _ in range(3))
    for effect in (old, recent, resolved):
        open_review(effect.id, Reason.NO_LOOKUP)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reviews_reviewitem SET opened_at = now() - interval '2 hours', "
            "due_at = now() - interval '1 minute' WHERE effect_id = %s",
            [old.id],
        )
        cursor.execute(
            "UPDATE reviews_reviewitem SET resolved_at = now(), opened_at = now() - "
            "interval '3 days' WHERE effect_id = %s",
            [resolved.id],
        )

    samples = scrape()

    assert value(samples, "ledger_review_items_open", reason="no_lookup") == 2
    assert value(samples, "ledger_review_items_overdue") == 1
    # The resolved item is older, but only open ones count.
    assert 7200 <= value(samples, "ledger_review_oldest_open_seconds") < 7300


def test_job_lag_is_the_wait_of_the_most_overdue_check(make_effect, scrape):
    waits = {"90 seconds": "unknown", "5 seconds": "dispatching", "-1 hour": "unknown"}
    # Resolved effects are no longer checked, whatever the column says.
    waits["5 hours"] = "confirmed"
    for wait, status in waits.items():
        effect = make_effect(status, attempt=1)
        with connection.cursor() as cursor:  # by the database clock, as the checker reads it
            cursor.execute(
                "UPDATE ledger_effect SET next_check_at = now() - %s::interval WHERE id = %s",
                [wait, effect.id],
            )

    samples = scrape()

    assert value(samples, "ledger_checks_due") == 2
    assert 90 <= value(samples, "ledger_check_lag_seconds") < 150


def test_alerts_pending_and_sent_by_kind(db, scrape):
    Alert.objects.create(kind="halt", key="h1")
    Alert.objects.create(kind="halt", key="h2", sent_at=timezone.now())
    Alert.objects.create(kind="review_overdue", key="r1")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_alert SET created_at = now() - interval '10 minutes'")

    samples = scrape()

    assert value(samples, "ledger_alerts_pending", kind="halt") == 1
    assert value(samples, "ledger_alerts_sent", kind="halt") == 1
    assert value(samples, "ledger_alerts_pending", kind="review_overdue") == 1
    assert 600 <= value(samples, "ledger_alerts_oldest_pending_seconds") < 700


def test_active_halts_by_scope(db, scrape):
    halt = apps.get_model("ledger", "Halt")
    for scope, name in (("tool", "charge_card"), ("tool", "send_email"), ("agent", "alice")):
        halt.objects.create(scope=scope, value=name, reason="test", halted_by="olga")
    halt.objects.create(scope="all", reason="test", halted_by="olga", resumed_at=timezone.now())

    samples = scrape()

    assert value(samples, "ledger_halts_active", scope="tool") == 2
    assert value(samples, "ledger_halts_active", scope="agent") == 1
    assert value(samples, "ledger_halts_active", scope="all") == 0


def test_without_the_halt_table_a_scrape_still_answers_without_the_halt_gauge(db, scrape):
    # As on a database where the halts migration has not run yet (rolled back with the test).
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE ledger_halt RENAME TO ledger_halt_elsewhere")

    samples = scrape()

    assert not any(key[0] == "ledger_halts_active" for key in samples)
    assert ("ledger_check_lag_seconds",) in samples


def test_the_gauges_are_read_once_per_refresh_period_not_per_scrape(
    make_effect, scrape, django_assert_num_queries
):
    make_effect("planned")
    assert value(scrape(), "ledger_effects", tool="charge_card", status="planned") == 1
    make_effect("planned")

    with django_assert_num_queries(0):
        cached = scrape(fresh=False)

    assert value(cached, "ledger_effects", tool="charge_card", status="planned") == 1
    assert value(scrape(), "ledger_effects", tool="charge_card", status="planned") == 2


def test_the_summary_is_read_again_when_the_period_has_passed(make_effect, scrape, settings):
    make_effect("planned")
    scrape()
    make_effect("planned")
    settings.LEDGER_METRICS_REFRESH = 1
    summary._read_at -= 1  # as if a second had passed since the last read

    samples = scrape(fresh=False)

    assert value(samples, "ledger_effects", tool="charge_card", status="planned") == 2


def test_stopping_the_summary_ends_its_refreshing_thread_at_once(db):
    """What keeps a thread started by one test from refreshing the summary in the next."""
    summary.latest()  # as a page does: starts the refreshing thread
    thread = summary._refresher
    assert thread is not None and thread.is_alive()
    summary.stop()
    assert not thread.is_alive()
