"""The state of the ledger as counts, read from a summary refreshed every few seconds: the
gauges of /metrics and the overview page.

No count is kept up to date by the hot path: a transition only bumps an in-memory counter
(`ledger.observability.metrics`), and no row is updated on every transition for someone to read
later. What
the gauges and the overview show is read here, by a handful of aggregate queries run at most
once per `LEDGER_METRICS_REFRESH` seconds per process. Every worker process answers from its
own copy; they agree within the refresh period.

A scrape (`summary()`) reads the summary again when it is older than the period. A page that
polls (`latest()`) never waits for that: it is answered from the copy at hand, and while pages
keep asking, a thread of the process re-reads the summary every period, so a page costs no
aggregate over a million effects however often it polls.

Tables of features that may not be installed yet (halts) are probed first and skipped when
absent, so a scrape never fails because of a missing table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ledger.models import (
    Agent,
    Alert,
    Effect,
    EffectEvent,
    EventSeal,
    Reason,
    RestoreWindow,
    ReviewItem,
    Tool,
)
from ledger.models.review import DUE_SOON
from ledger.models.states import INCOMPLETE, sql_list
from ledger.observability import effectcounts
from ledger.observability.metrics import tool_label
from ledger.rules.interlocks import blocked_branches

# Pinned: log pipelines filter on the name this module had before the ledger's subpackages.
log = logging.getLogger("ledger.summary")

_EFFECTS = Effect._meta.db_table
_REVIEWS = ReviewItem._meta.db_table
_ALERTS = Alert._meta.db_table
_AGENTS = Agent._meta.db_table
_EVENTS = EffectEvent._meta.db_table
_SEALS = EventSeal._meta.db_table
# Open review items are counted by age in hours: [0, 1), [1, 6), …, [168, ∞).
REVIEW_AGE_HOURS = (0, 1, 6, 24, 72, 168)
# Blocked branches named by the summary (the overview lists them), oldest first.
BLOCKED_SHOWN = 20
# How often the thread refreshing for pages wakes to look at the time (seconds), and after how
# many refresh periods without a page asking it stops.
_TICK = 0.5
_IDLE_PERIODS = 3
# Written by the halts work (ledger.containment.halts): a row per halt, active while resumed_at
# is NULL.
_HALTS = "ledger_halt"


@dataclass
class Summary:
    # (agent's mode, kind, tool, status) → count; `effects` sums it over mode and kind.
    effect_counts: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    # Names of the declared tools, read in the same pass: the gauges label the others UNDECLARED.
    declared_tools: frozenset[str] = frozenset()
    reviews_open: dict[str, int] = field(default_factory=dict)  # reason → count
    reviews_overdue: int = 0
    # Open items past DUE_SOON of their time (opened → due), not overdue yet: the items the
    # `review_due_soon` alert is about.
    reviews_due_soon: int = 0
    oldest_review_seconds: float = 0.0
    alerts_pending: dict[str, int] = field(default_factory=dict)  # kind → count
    alerts_sent: dict[str, int] = field(default_factory=dict)
    # Unsent rows whose last attempt failed (a channel refused them), by kind.
    alerts_failing: dict[str, int] = field(default_factory=dict)
    oldest_alert_seconds: float = 0.0
    # How long the row that has been due longest has waited for a sender (0 when none is due).
    alert_sender_lag_seconds: float = 0.0
    # None: the halts table is not there (not migrated yet), so no halt gauge is offered.
    halts_active: dict[str, int] | None = None
    halts_oldest_seconds: dict[str, float] | None = None  # scope → age of its oldest halt
    # Events above the chain's highest sealed event, and the age of the oldest of them.
    seal_pending: int = 0
    seal_lag_seconds: float = 0.0
    check_lag_seconds: float = 0.0
    checks_due: int = 0
    # Restore mode (ledger.restore): on or off, for how long, and the effects it put in doubt
    # that nobody has settled yet.
    restore_on: bool = False
    restore_seconds: float = 0.0
    restore_unchecked: int = 0
    # Agent's mode (None for an item that has no copy of its agent) → open items per age bucket
    # of REVIEW_AGE_HOURS.
    review_ages: dict[str | None, tuple[int, ...]] = field(default_factory=dict)
    # Planned effects held back by an upstream effect: how many, and the oldest BLOCKED_SHOWN
    # with the upstream holding each (ledger.rules.interlocks.blocked_branches).
    blocked_total: int = 0
    blocked: list[dict[str, Any]] = field(default_factory=list)
    taken_at: datetime = field(default_factory=timezone.now)

    @property
    def effects(self) -> dict[tuple[str, str], int]:
        """(tool label, status) → count, every mode and kind; undeclared tools as one label."""
        total: Counter[tuple[str, str]] = Counter()
        for (_, _, tool, status), n in self.effect_counts.items():
            total[tool_label(tool, self.declared_tools), status] += n
        return dict(total)


def _rows(sql: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


def read_summary() -> Summary:
    """One pass of aggregate queries, each served by an index named in ledger.models (the
    effects by status come from their counts, `ledger.observability.effectcounts`; the blocked
    branches read every planned effect with an upstream): they run once per refresh, never per
    request."""
    summary = Summary()
    # Kept by PostgreSQL as effects are written: no scan of the effects table.
    effectcounts.fold()
    summary.effect_counts = effectcounts.effect_counts()
    summary.declared_tools = frozenset(Tool.objects.values_list("name", flat=True))
    summary.review_ages = _review_ages()
    summary.blocked_total, summary.blocked = blocked_branches(BLOCKED_SHOWN)
    # review_open_idx: open items.
    summary.reviews_open = dict(
        _rows(f"SELECT reason, count(*) FROM {_REVIEWS} WHERE resolved_at IS NULL GROUP BY reason")
    )
    ((overdue, soon, oldest),) = _rows(
        f"SELECT count(*) FILTER (WHERE due_at < now()), "
        f"count(*) FILTER (WHERE due_at >= now() "
        f"AND opened_at + (due_at - opened_at) * {DUE_SOON} <= now()), "
        f"COALESCE(EXTRACT(EPOCH FROM now() - min(opened_at)), 0) "
        f"FROM {_REVIEWS} WHERE resolved_at IS NULL"
    )
    summary.reviews_overdue, summary.reviews_due_soon = overdue, soon
    summary.oldest_review_seconds = float(oldest)
    _read_alerts(summary)
    # effect_due_check_idx: the reconciliation queue of record. Lag is how long the most
    # overdue check has been waiting past its due time.
    ((due, lag),) = _rows(
        f"SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(next_check_at)), 0) "
        f"FROM {_EFFECTS} WHERE status IN ({sql_list(INCOMPLETE)}) "
        f"AND next_check_at IS NOT NULL AND next_check_at <= now()"
    )
    summary.checks_due, summary.check_lag_seconds = due, float(lag)
    summary.seal_pending, summary.seal_lag_seconds = _seal_lag()
    halts = _active_halts()
    if halts is not None:
        summary.halts_active = {scope: n for scope, (n, _) in halts.items()}
        summary.halts_oldest_seconds = {scope: age for scope, (_, age) in halts.items()}
    _read_restore(summary)
    return summary


def _read_restore(summary: Summary) -> None:
    """The open restore window, if any (one_open_restore_window), and its open review items."""
    rows = _rows(
        f"SELECT EXTRACT(EPOCH FROM now() - w.started_at), (SELECT count(*) FROM {_REVIEWS} r "
        f"WHERE r.reason = '{Reason.RESTORED_GAP.value}' AND r.resolved_at IS NULL) "
        f"FROM {RestoreWindow._meta.db_table} w "
        f"WHERE w.ended_at IS NULL"
    )
    if rows:
        summary.restore_on = True
        summary.restore_seconds, summary.restore_unchecked = float(rows[0][0]), rows[0][1]


def _read_alerts(summary: Summary) -> None:
    """The outbox by kind (sent ones counted too), and its oldest rows: over alert_unsent_idx.
    A row is due when it is neither leased nor backing off (`ledger.rules.outbox.lease`),
    and has been due since its lease or backoff ended, or since it was written."""
    for kind, pending, sent, failing in _rows(
        f"SELECT kind, count(*) FILTER (WHERE sent_at IS NULL), "
        f"count(*) FILTER (WHERE sent_at IS NOT NULL), "
        f"count(*) FILTER (WHERE sent_at IS NULL AND last_error <> '') "
        f"FROM {_ALERTS} GROUP BY kind"
    ):
        summary.alerts_pending[kind] = pending
        summary.alerts_sent[kind] = sent
        summary.alerts_failing[kind] = failing
    ((oldest_alert, sender_lag),) = _rows(
        f"SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0), "
        f"COALESCE(EXTRACT(EPOCH FROM now() - min(coalesce(leased_until, created_at)) "
        f"FILTER (WHERE leased_until IS NULL OR leased_until <= now())), 0) "
        f"FROM {_ALERTS} WHERE sent_at IS NULL"
    )
    summary.oldest_alert_seconds = float(oldest_alert)
    summary.alert_sender_lag_seconds = float(sender_lag)


def _seal_lag() -> tuple[int, float]:
    """Events the sealer has not reached: those above the highest sealed event (the seals'
    unique event index gives it), counted along the events' primary key, with the age of the
    oldest. A straggler below it (a transaction open longer than the grace) is the verifier's
    to report, not counted here."""
    ((pending, lag),) = _rows(
        f"SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0) "
        f"FROM {_EVENTS} WHERE id > COALESCE((SELECT max(event_id) FROM {_SEALS}), 0)"
    )
    return pending, float(lag)


def _review_ages() -> dict[str | None, tuple[int, ...]]:
    """Open review items per age bucket and agent's mode, in one pass over review_open_idx."""
    bounds = [*REVIEW_AGE_HOURS[1:], None]
    columns = ", ".join(
        f"count(*) FILTER (WHERE r.opened_at <= now() - interval '{low} hours'"
        + (f" AND r.opened_at > now() - interval '{high} hours')" if high else ")")
        for low, high in zip(REVIEW_AGE_HOURS, bounds, strict=True)
    )
    return {
        mode: tuple(counts)
        for mode, *counts in _rows(
            f"SELECT a.mode, {columns} FROM {_REVIEWS} r "
            f"LEFT JOIN {_AGENTS} a ON a.id = r.agent_id WHERE r.resolved_at IS NULL "
            "GROUP BY a.mode"
        )
    }


def _active_halts() -> dict[str, tuple[int, float]] | None:
    """Active halts by scope: how many, and how long the oldest has been on."""
    (present,) = _rows(
        "SELECT count(*) FROM information_schema.columns "
        f"WHERE table_name = '{_HALTS}' AND column_name IN ('scope', 'resumed_at', 'since')"
    )[0]
    if present != 3:
        return None
    try:
        # A savepoint: inside a caller's transaction a failure must not poison it.
        with transaction.atomic():
            return {
                scope: (n, float(age))
                for scope, n, age in _rows(
                    f"SELECT scope, count(*), EXTRACT(EPOCH FROM now() - min(since)) "
                    f"FROM {_HALTS} WHERE resumed_at IS NULL GROUP BY scope"
                )
            }
    except DatabaseError:
        return None


class SummaryCollector(Collector):
    """Yields the gauges from a cached `Summary`, refreshing it when it is older than the
    configured period; hands the same summary to pages (`latest`). One read at a time per
    process; concurrent readers share it."""

    def __init__(self) -> None:
        self._reading = threading.Lock()  # held for a whole read: one at a time
        self._state = threading.Lock()  # held for a moment: the fields below
        self._summary: Summary | None = None
        self._read_at = 0.0
        # Bumped by expire(): a read that began before it must not install its result.
        self._generation = 0
        self._wanted_at = 0.0  # when a page last asked (monotonic)
        self._refresher: threading.Thread | None = None

    def summary(self) -> Summary:
        """The summary, read again first when it is older than the period."""
        with self._reading:
            with self._state:
                fresh = self._fresh(settings.LEDGER_METRICS_REFRESH)
            return fresh or self._read()

    def latest(self) -> Summary:
        """The summary as last read, without waiting for a refresh (only the first read of the
        process is waited for). Keeps the refreshing thread going while pages ask."""
        with self._state:
            self._wanted_at = time.monotonic()
            current = self._summary
            # A thread is gone in a forked child (a worker forked after a read): start anew.
            if self._refresher is None or not self._refresher.is_alive():
                self._refresher = threading.Thread(
                    target=self._refresh_while_wanted, name="ledger-summary", daemon=True
                )
                self._refresher.start()
        return current or self.summary()

    def stop(self) -> None:
        """End the refreshing thread now, as if no page had asked for a long time, and wait for
        it: a test reads the summary in its own transaction, which the thread's connection does
        not see, so a thread left running by an earlier test must not refresh it meanwhile."""
        with self._state:
            self._wanted_at = float("-inf")
            thread = self._refresher
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def expire(self) -> None:
        """Forget the summary: the next reader reads it afresh."""
        with self._state:
            self._summary = None
            self._generation += 1

    def _fresh(self, period: float) -> Summary | None:
        if self._summary is not None and time.monotonic() - self._read_at < period:
            return self._summary
        return None

    def _read(self) -> Summary:
        """Read the summary and keep it (unless expired meanwhile). Hold `_reading`."""
        with self._state:
            generation = self._generation
        summary = read_summary()
        with self._state:
            if generation == self._generation:
                self._summary, self._read_at = summary, time.monotonic()
        return summary

    def _refresh_while_wanted(self) -> None:
        """The refreshing thread: re-read the summary whenever it has grown older than the
        period, until no page has asked for `_IDLE_PERIODS` periods. It reads only a summary
        that exists: after expire() the next reader reads it, in its own transaction. It holds
        no database connection between reads."""
        try:
            while self._wanted():
                time.sleep(_TICK)
                period = settings.LEDGER_METRICS_REFRESH
                try:
                    with self._reading:
                        with self._state:
                            due = self._summary is not None and self._fresh(period) is None
                        if due:
                            self._read()
                except DatabaseError:
                    log.warning("reading the summary failed; pages keep the old one", exc_info=True)
                    time.sleep(period)
                finally:
                    connection.close()
        finally:
            with self._state:
                if self._refresher is threading.current_thread():
                    self._refresher = None

    def _wanted(self) -> bool:
        """Whether a page asked within the last `_IDLE_PERIODS` periods. When none did, the
        thread is forgotten at once, under the lock, so the next page to ask starts another."""
        with self._state:
            idle = time.monotonic() - self._wanted_at
            if idle <= _IDLE_PERIODS * settings.LEDGER_METRICS_REFRESH:
                return True
            self._refresher = None
            return False

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.summary()
        yield from _effect_and_review_gauges(s)
        yield from _alert_gauges(s)
        yield from _background_gauges(s)
        yield GaugeMetricFamily(
            "ledger_summary_age_seconds",
            "Seconds since this process last read the summary the gauges above come from.",
            value=time.monotonic() - self._read_at,
        )


def _effect_and_review_gauges(s: Summary) -> Iterator[GaugeMetricFamily]:
    yield _labelled("ledger_effects", "Effects by tool and status.", ["tool", "status"], s.effects)
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
        "ledger_review_items_due_soon",
        f"Open review items past {DUE_SOON:.0%} of their time to be resolved, not overdue yet.",
        value=s.reviews_due_soon,
    )
    yield GaugeMetricFamily(
        "ledger_review_oldest_open_seconds",
        "Age of the oldest open review item (0 when none is open).",
        value=s.oldest_review_seconds,
    )
    yield GaugeMetricFamily(
        "ledger_blocked_branches",
        "Planned effects held back by an upstream effect that is not confirmed for good.",
        value=s.blocked_total,
    )


def _alert_gauges(s: Summary) -> Iterator[GaugeMetricFamily]:
    by_kind = {
        "ledger_alerts_pending": ("Alerts in the outbox not sent yet.", s.alerts_pending),
        "ledger_alerts_sent": ("Alerts the outbox has sent (rows kept).", s.alerts_sent),
        "ledger_alerts_failing": (
            "Unsent alerts whose last delivery failed (a channel refused them).",
            s.alerts_failing,
        ),
    }
    for name, (documentation, counts) in by_kind.items():
        yield _labelled(name, documentation, ["kind"], {(k,): n for k, n in counts.items()})
    yield GaugeMetricFamily(
        "ledger_alerts_oldest_pending_seconds",
        "Age of the oldest unsent alert (0 when none waits).",
        value=s.oldest_alert_seconds,
    )
    yield GaugeMetricFamily(
        "ledger_alert_sender_lag_seconds",
        "How long the alert that has been due longest has waited for a sender (0 when none is "
        "due).",
        value=s.alert_sender_lag_seconds,
    )


def _background_gauges(s: Summary) -> Iterator[GaugeMetricFamily]:
    if s.halts_active is not None and s.halts_oldest_seconds is not None:
        yield _labelled(
            "ledger_halts_active",
            "Active halts by scope.",
            ["scope"],
            {(scope,): n for scope, n in s.halts_active.items()},
        )
        yield _labelled(
            "ledger_halts_oldest_active_seconds",
            "How long the oldest active halt of each scope has been on.",
            ["scope"],
            {(scope,): age for scope, age in s.halts_oldest_seconds.items()},
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
        "ledger_restore_mode",
        "1 while the ledger is in restore mode (its database went back in time), else 0.",
        value=int(s.restore_on),
    )
    yield GaugeMetricFamily(
        "ledger_restore_mode_seconds",
        "How long restore mode has been on (0 when off).",
        value=s.restore_seconds,
    )
    yield GaugeMetricFamily(
        "ledger_restore_unchecked_effects",
        "Effects restore mode put in doubt that nobody has settled yet.",
        value=s.restore_unchecked,
    )
    yield GaugeMetricFamily(
        "ledger_seal_pending_events",
        "Events the audit chain's sealer has not reached yet.",
        value=s.seal_pending,
    )
    yield GaugeMetricFamily(
        "ledger_seal_lag_seconds",
        "Age of the oldest event the sealer has not reached (0 when it has reached them all).",
        value=s.seal_lag_seconds,
    )


def _labelled(
    name: str, documentation: str, labels: list[str], values: dict[tuple[str, ...], float]
) -> GaugeMetricFamily:
    """A gauge with one sample per label tuple, in a stable order."""
    gauge = GaugeMetricFamily(name, documentation, labels=labels)
    for key, n in sorted(values.items()):
        gauge.add_metric(list(key), n)
    return gauge


# The one collector of this process: /metrics registers it (`ledger.overview.scrape`), and the
# pages read its last summary.
summary = SummaryCollector()
