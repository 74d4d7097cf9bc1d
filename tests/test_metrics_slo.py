"""/metrics for the alert rules and the dashboard of deploy/: the agent API's latency histogram,
limit refusals, the review items due soon, the sealer's lag, the alert sender's lag and failing
deliveries, and how long halts have been on.

Real requests through the whole middleware stack and real rows in the test database; counters
are process-wide, so each test compares before and after. The same under gunicorn's
multiprocess mode is the last test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ledger.audit.seal import seal_all
from ledger.containment.keys import issue_key
from ledger.models import Agent, Alert, Halt, Reason, Tool
from ledger.overview.summary import summary
from ledger.rules.limits import refusal_labels
from ledger.rules.reviewqueue import open_review
from tests.factories import gunicorn_on_test_database

TOKEN = "metrics-token-for-the-slo-tests"
HISTOGRAM = "ledger_api_request_duration_seconds"
EFFECTS = "/api/v1/effects"
ONE_EFFECT = "/api/v1/effects/{effect_id}"


@pytest.fixture
def scrape(settings):
    """GET /metrics, read afresh: {(sample name, sorted labels…): value}."""
    settings.LEDGER_METRICS_TOKEN = TOKEN
    settings.LEDGER_METRICS_REFRESH = 3600

    def get() -> dict[tuple, float]:
        summary.expire()
        response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200, response.content
        return parse(response.content.decode())

    yield get
    summary.expire()


def parse(text: str) -> dict[tuple, float]:
    return {
        (sample.name, *sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[tuple, float], name: str, **labels: str) -> float:
    return samples.get((name, *sorted(labels.items())), 0.0)


def calls(samples: dict[tuple, float], method: str, route: str, status: int) -> float:
    return value(samples, f"{HISTOGRAM}_count", method=method, route=route, status=str(status))


def grown(before: dict, after: dict, method: str, route: str, status: int) -> float:
    return calls(after, method, route, status) - calls(before, method, route, status)


def backdate(table: str, column: str, interval: str, where: str = "TRUE") -> None:
    """Move a timestamp back by the database clock, which the gauges read."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {column} = now() - %s::interval WHERE {where}", [interval]
        )


# --- The agent API's latency histogram ---------------------------------------------------------


def test_each_api_call_is_timed_under_its_route_template_and_status(alice, scrape):
    before = scrape()
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"])
    assert alice.get(f"/effects/{uuid.uuid4()}").status_code == 404
    after = scrape()

    assert grown(before, after, "POST", EFFECTS, 201) == 1
    assert grown(before, after, "POST", "/api/v1/effects/{effect_id}/outcome", 200) == 1
    assert grown(before, after, "GET", ONE_EFFECT, 404) == 1
    # Raw paths never become labels: no effect id appears in any series.
    assert not [key for key in after if effect["id"] in str(key)]
    # Buckets are cumulative and end in +Inf with the count; the sum is the time taken.
    labels = {"method": "POST", "route": EFFECTS, "status": "201"}
    buckets = sorted(
        (float(dict(key[1:])["le"]), n)
        for key, n in after.items()
        if key[0] == f"{HISTOGRAM}_bucket" and {**dict(key[1:]), "le": ""} == {**labels, "le": ""}
    )
    counts = [n for _, n in buckets]
    assert counts == sorted(counts) and buckets[-1][0] == float("inf")
    assert buckets[-1][1] == value(after, f"{HISTOGRAM}_count", **labels)
    assert value(after, f"{HISTOGRAM}_sum", **labels) > value(before, f"{HISTOGRAM}_sum", **labels)


def test_a_long_poll_is_timed_apart_from_plain_reads(alice, scrape):
    effect = alice.intent()
    before = scrape()
    assert alice.get(f"/effects/{effect['id']}").status_code == 200
    assert alice.get(f"/effects/{effect['id']}", {"wait": 1}).status_code == 200
    after = scrape()

    assert grown(before, after, "GET", ONE_EFFECT, 200) == 1
    assert grown(before, after, "GET", ONE_EFFECT + "?wait", 200) == 1
    # It waited its second out (nothing changed), and that time is under the long poll's route.
    waited = {"method": "GET", "route": ONE_EFFECT + "?wait", "status": "200"}
    assert (
        value(after, f"{HISTOGRAM}_sum", **waited) - value(before, f"{HISTOGRAM}_sum", **waited)
        >= 0.9
    )


def test_unknown_paths_odd_methods_and_early_refusals_stay_bounded(alice, scrape):
    before = scrape()
    for n in range(3):  # three made-up paths: one series
        assert alice.get(f"/nothing-here-{n}").status_code == 404
    assert alice.http.generic("BREW", EFFECTS, headers=alice._headers()).status_code == 405
    # Refused by the API's edge before the URL is resolved: still under its route.
    big = alice.post("/effects", raw="x" * 2_000_000)
    assert big.status_code == 413
    after = scrape()

    assert grown(before, after, "GET", "unmatched", 404) == 3
    assert grown(before, after, "other", EFFECTS, 405) == 1
    assert grown(before, after, "POST", EFFECTS, 413) == 1
    assert not [key for key in after if "nothing-here" in str(key) or "BREW" in str(key)]


def test_pages_and_the_scrape_itself_are_not_timed(olga, scrape):
    before = scrape()
    operator = Client()
    operator.force_login(olga)
    assert operator.get("/queue/").status_code == 200
    after = scrape()

    timed = {k: v for k, v in after.items() if k[0] == f"{HISTOGRAM}_count"}
    assert timed == {k: v for k, v in before.items() if k[0] == f"{HISTOGRAM}_count"}
    # The operator API's /api/v1/operator/queue is an API route, timed as the others are.
    routes = {dict(k[1:]).get("route", "") for k in after}
    assert not [r for r in routes if r.startswith(("/queue", "/metrics"))]


# --- Limit refusals ------------------------------------------------------------------------------


def _charge(client, step: str) -> dict:
    return client.intent(step_id=step, request={"amount": "10.00", "currency": "EUR"})


def test_refused_claims_are_counted_by_the_limits_scope_and_kind(alice, bob, scrape):
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", limit_claims_per_minute=1
    )
    Agent.objects.filter(pk=bob.agent.pk).update(limit_amount_per_day={"EUR": "5.00"})
    name = "ledger_limit_refusals_total"
    before = scrape()

    # 10 EUR over bob's 5 EUR a day (the tool's count it took rolls back with the refusal).
    bob.claim(_charge(bob, "a")["id"], expect=429)
    alice.claim(_charge(alice, "a")["id"])
    for step in ("b", "c"):
        alice.claim(_charge(alice, step)["id"], expect=429)
    after = scrape()

    def refusals(samples: dict, scope: str, kind: str) -> float:
        return value(samples, name, scope=scope, kind=kind)

    assert (
        refusals(after, "tool", "claims_per_minute") - refusals(before, "tool", "claims_per_minute")
        == 2
    )
    assert (
        refusals(after, "agent", "amount_per_day") - refusals(before, "agent", "amount_per_day")
        == 1
    )
    assert grown(before, after, "POST", "/api/v1/effects/{effect_id}/claim", 429) == 3
    # No agent's or tool's name becomes a label.
    assert not [k for k in after if k[0] == name and ("bob" in str(k) or "charge_card" in str(k))]


@pytest.mark.parametrize(
    ("which", "labels"),
    [
        ("tool:charge_card:claims_per_minute", ("tool", "claims_per_minute")),
        ("agent:alice:amount_per_day:EUR", ("agent", "amount_per_day")),
        ("agent:a:b:claims_per_minute", ("agent", "claims_per_minute")),
        ("agent:amount_per_day:claims_per_minute", ("agent", "claims_per_minute")),
        ("tool:x:amount_per_day:?", ("tool", "amount_per_day")),
        ("", ("other", "other")),
        ("run:x:per_hour", ("other", "other")),
    ],
)
def test_a_refusals_labels_come_from_its_limit_never_from_names(which, labels):
    assert refusal_labels(which) == labels


# --- Gauges from the summary ---------------------------------------------------------------------


def test_review_items_due_soon_are_those_past_three_quarters_of_their_time(make_effect, scrape):
    items = {
        "early": ("1 hour", "-23 hours"),  # opened 1 h ago, due in 23 h
        "soon": ("20 hours", "-4 hours"),
        "overdue": ("25 hours", "1 hour"),
    }
    for name, (opened, due) in items.items():
        effect = make_effect("unknown", attempt=1, step_id=name)
        open_review(effect.id, Reason.NO_LOOKUP)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE reviews_reviewitem SET opened_at = now() - %s::interval, "
                "due_at = now() - %s::interval WHERE effect_id = %s",
                [opened, due, effect.id],
            )

    samples = scrape()

    assert value(samples, "ledger_review_items_due_soon") == 1
    assert value(samples, "ledger_review_items_overdue") == 1


def test_the_sealer_lag_is_the_age_of_the_oldest_event_not_sealed(alice, scrape):
    first = alice.intent(step_id="first")
    assert seal_all() > 0
    samples = scrape()
    assert value(samples, "ledger_seal_pending_events") == 0
    assert value(samples, "ledger_seal_lag_seconds") == 0

    alice.outcome(first["id"], alice.claim(first["id"])["lease_token"])
    # Events are append-only: one written ten minutes ago is a copy of the last, so dated.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status, "
            "reason, data, digest, created_at) SELECT effect_id, kind, actor, from_status, "
            "to_status, reason, data, digest, now() - interval '10 minutes' "
            "FROM ledger_effectevent ORDER BY id DESC LIMIT 1"
        )
    alice.intent(step_id="second")
    samples = scrape()

    pending = value(samples, "ledger_seal_pending_events")
    assert pending == 4  # claimed, outcome, the ten-minute-old one, the second intent
    assert 600 <= value(samples, "ledger_seal_lag_seconds") < 700
    assert seal_all() == pending
    samples = scrape()
    assert value(samples, "ledger_seal_pending_events") == 0
    assert value(samples, "ledger_seal_lag_seconds") == 0


def test_how_long_the_oldest_active_halt_of_each_scope_has_been_on(db, scrape):
    for scope, name, age in (
        ("tool", "charge_card", "3 hours"),
        ("tool", "send_email", "1 hour"),
        ("agent", "alice", "5 minutes"),
    ):
        halt = Halt.objects.create(scope=scope, value=name, reason="test", halted_by="olga")
        backdate("ledger_halt", "since", age, f"id = {halt.id}")
    resumed = Halt.objects.create(scope="all", reason="test", halted_by="olga")
    backdate("ledger_halt", "since", "2 days", f"id = {resumed.id}")
    Halt.objects.filter(pk=resumed.pk).update(resumed_at=timezone.now())

    samples = scrape()

    oldest = "ledger_halts_oldest_active_seconds"
    assert 3 * 3600 <= value(samples, oldest, scope="tool") < 3 * 3600 + 60
    assert 300 <= value(samples, oldest, scope="agent") < 360
    assert (oldest, ("scope", "all")) not in samples  # resumed: no longer on
    assert value(samples, "ledger_halts_active", scope="tool") == 2


def test_the_alert_senders_lag_counts_due_rows_only(db, scrape):
    due = Alert.objects.create(kind="halt", key="due")
    backdate("ledger_alert", "created_at", "7 minutes", f"id = '{due.id}'")
    # A row backing off after a failure is not due: a refusing channel is not a stopped sender.
    failing = Alert.objects.create(kind="review_overdue", key="failing", last_error="refused")
    backdate("ledger_alert", "created_at", "1 hour", f"id = '{failing.id}'")
    Alert.objects.filter(pk=failing.pk).update(
        leased_until=timezone.now() + timedelta(minutes=5), attempts=3
    )
    Alert.objects.create(kind="callback", key="cb", last_error="503")
    Alert.objects.create(kind="halt", key="sent", sent_at=timezone.now(), last_error="old")

    samples = scrape()

    assert 420 <= value(samples, "ledger_alert_sender_lag_seconds") < 480
    assert 3600 <= value(samples, "ledger_alerts_oldest_pending_seconds") < 3660
    assert value(samples, "ledger_alerts_failing", kind="review_overdue") == 1
    assert value(samples, "ledger_alerts_failing", kind="callback") == 1
    assert value(samples, "ledger_alerts_failing", kind="halt") == 0
    assert ("ledger_alerts_failing", ("kind", "halt")) in samples

    # A lease that ran out (its sender died) is due again from the end of the lease.
    Alert.objects.filter(pk=due.pk).delete()
    backdate("ledger_alert", "leased_until", "2 minutes", f"id = '{failing.id}'")
    Alert.objects.filter(kind="callback").delete()
    assert 120 <= value(scrape(), "ledger_alert_sender_lag_seconds") < 180


def test_with_nothing_waiting_every_lag_is_zero(db, scrape):
    samples = scrape()
    for name in (
        "ledger_alert_sender_lag_seconds",
        "ledger_seal_lag_seconds",
        "ledger_seal_pending_events",
        "ledger_review_items_due_soon",
    ):
        assert (name,) in samples and samples[(name,)] == 0, name


# --- Under gunicorn ----------------------------------------------------------------------------


@pytest.fixture
def server(tools, tmp_path) -> Iterator[tuple[str, Path]]:
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "LEDGER_METRICS_TOKEN": TOKEN,
        "LEDGER_METRICS_REFRESH": "1",
    }
    with gunicorn_on_test_database(tmp_path, workers=2, threads=4, env=env) as (url, _, _):
        yield url, metrics_dir


@pytest.mark.django_db(transaction=True)
def test_under_gunicorn_every_worker_answers_with_every_workers_calls_and_refusals(server):
    url, metrics_dir = server
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount", currency_path="currency", limit_claims_per_minute=5
    )
    key = issue_key(Agent.objects.create(name="slo"))

    def one(n: int) -> int:
        with httpx.Client(trust_env=False, timeout=30) as client:  # a connection per call
            return client.post(
                f"{url}/api/v1/effects",
                headers={"Authorization": f"Bearer {key}"},
                json={
                    "run_id": "slo",
                    "step_id": f"s{n}",
                    "tool": "charge_card",
                    "target": "acct_42",
                    "request": {"amount": "1.00", "currency": "EUR"},
                    "claim": True,
                    "owner": "w",
                },
            ).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(one, range(24)))
    created, refused = statuses.count(201), statuses.count(429)
    # The minute may turn during the burst: at most two windows' worth get through.
    assert created + refused == 24 and 5 <= created <= 10
    timed_by = [f for f in metrics_dir.iterdir() if f.name.startswith("histogram_")]
    assert len(timed_by) == 2, f"both workers should have served calls: {timed_by}"

    for _ in range(6):  # a new connection each time, so either worker answers
        response = httpx.get(
            f"{url}/metrics",
            headers={"Authorization": f"Bearer {TOKEN}", "Connection": "close"},
            trust_env=False,
            timeout=10,
        )
        samples = parse(response.text)
        assert calls(samples, "POST", EFFECTS, 201) == created
        assert calls(samples, "POST", EFFECTS, 429) == refused
        assert (
            value(samples, "ledger_limit_refusals_total", scope="tool", kind="claims_per_minute")
            == refused
        )
