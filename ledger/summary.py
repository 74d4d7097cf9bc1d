"""The state of the ledger as gauges, read from a summary refreshed every few seconds.

No gauge is kept up to date by the hot path: a transition only bumps an in-memory counter
(`ledger.metrics`). What the gauges show is read here, by a handful of aggregate queries run
at most once per `LEDGER_METRICS_REFRESH` seconds per process, when someone scrapes. Every
worker process answers from its own copy; they agree within the refresh period.

Tables of features that may not be installed yet (halts) are probed first and skipped when
absent, so a scrape never fails because of a missing table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ledger.models import Alert, Effect, ReviewItem
from ledger.states import INCOMPLETE, sql_list

_EFFECTS = Effect._meta.db_table
_REVIEWS = ReviewItem._meta.db_table
_ALERTS = Alert._meta.db_table
# Written by the halts work (ledger.halts): a row per halt, active while lifted_at is NULL.
_HALTS = "ledger_halt"


@dataclass
class Summary:
    effects: dict[tuple[str, str], int] = field(default_factory=dict)  # (tool, status) → count
    reviews_open: dict[str, int] = field(default_factory=dict)  # reason → count
    reviews_overdue: int = 0
    oldest_review_seconds: float = 0.0
    alerts_pending: dict[str, int] = field(default_factory=dict)  # kind → count
    alerts_sent: dict[str, int] = field(default_factory=dict)
    oldest_alert_seconds: float = 0.0
    # None: the halts table is not there (not migrated yet), so no halt gauge is offered.
    halts_active: dict[str, int] | None = None
    check_lag_seconds: float = 0.0
    checks_due: int = 0


def _rows(sql: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


def read_summary() -> Summary:
    """One pass of aggregate queries (each served by an index named in ledger.models, except the
    effects count, which scans: it runs once per refresh, never per request)."""
    summary = Summary()
    summary.effects = {
        (tool, status): n
        for tool, status, n in _rows(
            f"SELECT tool, status, count(*) FROM {_EFFECTS} GROUP BY tool, status"
        )
    }
    # review_open_idx: open items.
    summary.reviews_open = dict(
        _rows(f"SELECT reason, count(*) FROM {_REVIEWS} WHERE resolved_at IS NULL GROUP BY reason")
    )
    ((overdue, oldest),) = _rows(
        f"SELECT count(*) FILTER (WHERE due_at < now()), "
        f"COALESCE(EXTRACT(EPOCH FROM now() - min(opened_at)), 0) "
        f"FROM {_REVIEWS} WHERE resolved_at IS NULL"
    )
    summary.reviews_overdue, summary.oldest_review_seconds = overdue, float(oldest)
    # alert_unsent_idx: the pending ones; sent ones are counted by kind.
    for kind, pending, sent in _rows(
        f"SELECT kind, count(*) FILTER (WHERE sent_at IS NULL), "
        f"count(*) FILTER (WHERE sent_at IS NOT NULL) FROM {_ALERTS} GROUP BY kind"
    ):
        summary.alerts_pending[kind] = pending
        summary.alerts_sent[kind] = sent
    ((oldest_alert,),) = _rows(
        f"SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0) "
        f"FROM {_ALERTS} WHERE sent_at IS NULL"
    )
    summary.oldest_alert_seconds = float(oldest_alert)
    # effect_due_check_idx: the reconciliation queue of record. Lag is how long the most
    # overdue check has been waiting past its due time.
    ((due, lag),) = _rows(
        f"SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(next_check_at)), 0) "
        f"FROM {_EFFECTS} WHERE status IN ({sql_list(INCOMPLETE)}) "
        f"AND next_check_at IS NOT NULL AND next_check_at <= now()"
    )
    summary.checks_due, summary.check_lag_seconds = due, float(lag)
    summary.halts_active = _active_halts()
    return summary


def _active_halts() -> dict[str, int] | None:
    (present,) = _rows(
        "SELECT count(*) FROM information_schema.columns "
        f"WHERE table_name = '{_HALTS}' AND column_name IN ('scope', 'lifted_at')"
    )[0]
    if present != 2:
        return None
    try:
        # A savepoint: inside a caller's transaction a failure must not poison it.
        with transaction.atomic():
            return dict(
                _rows(
                    f"SELECT scope, count(*) FROM {_HALTS} WHERE lifted_at IS NULL GROUP BY scope"
                )
            )
    except DatabaseError:
        return None


class SummaryCollector(Collector):
    """Yields the gauges from a cached `Summary`, refreshing it when it is older than the
    configured period. One refresh at a time per process; concurrent scrapes share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._summary: Summary | None = None
        self._read_at = 0.0

    def summary(self) -> Summary:
        with self._lock:
            age = time.monotonic() - self._read_at
            if self._summary is None or age >= settings.LEDGER_METRICS_REFRESH:
                self._summary = read_summary()
                self._read_at = time.monotonic()
            return self._summary

    def expire(self) -> None:
        with self._lock:
            self._summary = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.summary()
        yield _labelled(
            "ledger_effects", "Effects by tool and status.", ["tool", "status"], s.effects
        )
        yield _labelled(
            "ledger_review_items_open",
            "Open review items by reason.",
            ["reason"],
            {(reason,): n for reason, n in s.reviews_open.items()},
        )
        yield GaugeMetricFamily(
            "ledger_review_items_overdue", "Open review items past due_at.", value=s.reviews_overdue
        )
        yield GaugeMetricFamily(
            "ledger_review_oldest_open_seconds",
            "Age of the oldest open review item (0 when none is open).",
            value=s.oldest_review_seconds,
        )
        pending = GaugeMetricFamily(
            "ledger_alerts_pending", "Alerts in the outbox not sent yet.", labels=["kind"]
        )
        sent = GaugeMetricFamily(
            "ledger_alerts_sent", "Alerts the outbox has sent (rows kept).", labels=["kind"]
        )
        for kind in sorted(s.alerts_pending):
            pending.add_metric([kind], s.alerts_pending[kind])
            sent.add_metric([kind], s.alerts_sent[kind])
        yield pending
        yield sent
        yield GaugeMetricFamily(
            "ledger_alerts_oldest_pending_seconds",
            "Age of the oldest unsent alert (0 when none waits).",
            value=s.oldest_alert_seconds,
        )
        if s.halts_active is not None:
            yield _labelled(
                "ledger_halts_active",
                "Active halts by scope.",
                ["scope"],
                {(scope,): n for scope, n in s.halts_active.items()},
            )
        yield GaugeMetricFamily(
            "ledger_checks_due", "Reconciliation checks due now.", value=s.checks_due
        )
        yield GaugeMetricFamily(
            "ledger_check_lag_seconds",
            "How long the most overdue reconciliation check has waited past its due time.",
            value=s.check_lag_seconds,
        )
        yield GaugeMetricFamily(
            "ledger_summary_age_seconds",
            "Seconds since this process last read the summary the gauges above come from.",
            value=time.monotonic() - self._read_at,
        )


def _labelled(
    name: str, documentation: str, labels: list[str], values: dict[tuple[str, ...], int]
) -> GaugeMetricFamily:
    """A gauge with one sample per label tuple, in a stable order."""
    gauge = GaugeMetricFamily(name, documentation, labels=labels)
    for key, n in sorted(values.items()):
        gauge.add_metric(list(key), n)
    return gauge
