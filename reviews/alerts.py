"""Alerts on review items, and the one sender of the alert outbox.

`sweep` (a django-q2 schedule) enqueues, in one set-based statement, an alert for every open
review item that has passed 75% of its time (opened_at → due_at) and one for every item that
is overdue; the unique (kind, key) of the outbox makes each fire once, however often the sweep
runs. An item first seen already overdue gets only the overdue alert.

`send_due` (another schedule, every minute) leases one alert at a time (`ledger.outbox`),
delivers it to every configured channel that has not taken it yet, outside any transaction,
and records the result. Whatever fails is retried after a backoff, so each alert reaches each
channel at least once. Halts and limit breaches enqueue through `ledger.outbox.notify`; agents'
callbacks are enqueued by the status-change trigger (`ledger.notifications`) and go only to the
effect's own callback_url.
"""

from __future__ import annotations

import logging
import time

from django.db import connection

from ledger.models import Agent, Alert, AlertKind, Effect, ReviewItem
from ledger.outbox import Leased, finish, lease
from reviews.alertchannels import DeliveryFailed, channels, send_callback, subject

log = logging.getLogger(__name__)

# A run stops leasing after this many seconds; with one send's timeouts (email and webhook,
# 10 s each) it stays under django-q2's task timeout (60 s), itself under `retry` (120 s) and
# the outbox lease (90 s), so no second run or sender takes rows this one is sending.
TIME_BUDGET = 30.0
# The fraction of an item's time after which it is "due soon".
DUE_SOON = 0.75
# Tries of one agent callback (backoff 30 s … 8 min between them, ledger.outbox.retry_delay).
CALLBACK_ATTEMPTS = 6


def sweep() -> int:
    """Enqueue the review items' alerts that are due. Returns how many were new."""
    # Open items are few (the review queue); the partial index review_open_due_idx finds them.
    sql = f"""
        INSERT INTO {Alert._meta.db_table}
               (id, kind, key, payload, created_at, attempts, delivered, last_error)
        SELECT gen_random_uuid(), m.kind, r.id::text,
               jsonb_build_object(
                   'summary', e.effect_key || ' (' || e.tool || ', ' || r.reason || ')',
                   'link', '/effects/' || e.id || '/',
                   'review_item', r.id, 'effect_id', e.id, 'effect_key', e.effect_key,
                   'tool', e.tool, 'agent', a.name, 'run_id', e.run_id, 'status', e.status,
                   'reason', r.reason, 'opened_at', r.opened_at, 'due_at', r.due_at),
               now(), 0, '[]'::jsonb, ''
          FROM {ReviewItem._meta.db_table} r
          JOIN {Effect._meta.db_table} e ON e.id = r.effect_id
          JOIN {Agent._meta.db_table} a ON a.id = e.agent_id
         CROSS JOIN LATERAL (VALUES
                   (%(soon)s, r.opened_at + (r.due_at - r.opened_at) * %(fraction)s),
                   (%(overdue)s, r.due_at)) AS m(kind, fires_at)
         WHERE r.resolved_at IS NULL
           AND m.fires_at <= now()
           AND NOT (m.kind = %(soon)s AND r.due_at <= now())
        ON CONFLICT (kind, key) DO NOTHING
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "soon": AlertKind.REVIEW_DUE_SOON.value,
                "overdue": AlertKind.REVIEW_OVERDUE.value,
                "fraction": DUE_SOON,
            },
        )
        return cursor.rowcount


def process_one(alert: Leased) -> bool:
    """Deliver one leased alert to the channels that have not taken it. Returns whether it is
    now sent; a failure leaves it for a later attempt."""
    if alert.kind == AlertKind.CALLBACK:
        return _process_callback(alert)
    configured = channels()
    if not configured:
        # Nobody configured a channel: the log is the channel, and the alert is not kept
        # pending for ever (the README's configuration table says how to route alerts).
        log.warning("alert %s (no alert channel configured): %s", alert.id, subject(alert))
        return finish(alert, ["log"])
    delivered, errors = [], []
    for name, send in configured.items():
        if name in alert.delivered:
            continue
        try:
            send(alert)
        except DeliveryFailed as exc:
            errors.append(str(exc))
        else:
            delivered.append(name)
    error = "; ".join(errors)
    if error:
        log.warning("alert %s, attempt %s, not delivered: %s", alert.id, alert.attempt, error)
    return finish(alert, delivered, error) and not error


def _process_callback(alert: Leased) -> bool:
    """An agent's callback goes to its own URL only. Unlike an operator's alert it is given up
    after CALLBACK_ATTEMPTS (the effect itself stays readable, also by long poll): an agent
    that went away must not keep the sender busy for ever."""
    try:
        send_callback(alert)
    except DeliveryFailed as exc:
        if alert.attempt >= CALLBACK_ATTEMPTS:
            log.warning("callback %s given up after %s attempts: %s", alert.id, alert.attempt, exc)
            finish(alert, ["abandoned"])
            return False
        log.warning("callback %s, attempt %s, not delivered: %s", alert.id, alert.attempt, exc)
        finish(alert, [], str(exc))
        return False
    return finish(alert, ["callback"])


def send_due(budget: float = TIME_BUDGET) -> dict[str, int]:
    """Send due alerts one at a time until none is left or the time budget is spent."""
    deadline = time.monotonic() + budget
    result = {"sent": 0, "failed": 0}
    while time.monotonic() < deadline:
        taken = lease(1)
        if not taken:
            break
        result["sent" if process_one(taken[0]) else "failed"] += 1
    if any(result.values()):
        log.info("alert sender: %s", result)
    return result
