"""The one sender of the alert outbox.

`send_due` (a django-q2 schedule, every minute) leases one alert at a time
(`ledger.rules.outbox`), delivers it to every configured channel that has not taken it
yet, outside any transaction, and records the result. Whatever fails is retried after a backoff,
so each alert reaches each channel at least once. A failure is always the failure of one alert
(and one channel): any exception while delivering a row, whatever its type, is recorded as a
failed attempt of that row and the sender goes on to the next, so no row an agent could shape (a
callback URL, a run id in a subject) can stop the alerts behind it. An alert about
something a team owns goes to that team's channels when it has any (`reviews.alerts.routing`):
a bad team channel is that alert's failure only. Halts and limit breaches
enqueue through `ledger.rules.outbox.notify`, the review items' alerts through
`reviews.alerts.due`; agents' callbacks are enqueued by the status-change trigger
(`ledger.api.notifications`) and go only to the effect's own callback_url
(`reviews.alerts.callbacks`).
"""

from __future__ import annotations

import logging
import time

from django.db import transaction

from ledger.models import AlertKind
from ledger.rules.outbox import Leased, back_off, finish, lease
from ledger.rules.plaintext import one_line
from reviews.alerts.callbacks import CallbackFailed, send_callback
from reviews.alerts.channels import DeliveryFailed, subject
from reviews.alerts.routing import channels_for

# The module's name before it moved into reviews/alerts/: log pipelines filter on it.
log = logging.getLogger("reviews.alerts")

# A run stops leasing after this many seconds; with one send's timeouts (email and webhook,
# 10 s each) it stays under django-q2's task timeout (60 s), itself under `retry` (120 s) and
# the outbox lease (90 s), so no second run or sender takes rows this one is sending.
TIME_BUDGET = 30.0
# Tries of one agent callback (backoff 30 s … 8 min between them,
# ledger.rules.outbox.retry_delay).
CALLBACK_ATTEMPTS = 6


def _describe(exc: Exception) -> str:
    """One line for last_error and the log: the channel's own words for its failures, the
    type and message for anything else."""
    known = isinstance(exc, (DeliveryFailed, CallbackFailed))
    return one_line(str(exc) if known else f"{type(exc).__name__}: {exc}")


def process_one(alert: Leased) -> bool:
    """Deliver one leased alert to the channels that have not taken it. Returns whether it is
    now sent; a failure leaves it for a later attempt."""
    if alert.problem:
        raise ValueError(alert.problem)
    if alert.kind == AlertKind.CALLBACK:
        return _process_callback(alert)
    # The team's own channels when the alert is about something of a team that has them, the
    # global ones otherwise (`reviews.alerts.routing`, ADR 0014).
    configured = channels_for(alert)
    if not configured:
        # Nobody configured a channel: the log is the channel, and the alert is not kept
        # pending for ever (the README's configuration table says how to route alerts).
        log.warning("alert %s (no alert channel configured): %s", alert.id, subject(alert))
        return _record(alert, ["log"])
    delivered, errors = [], []
    for name, send in configured.items():
        if name in alert.delivered:
            continue
        try:
            send(alert)
        except Exception as exc:  # one channel's failure, whatever it is, is that channel's
            errors.append(_describe(exc))
        else:
            delivered.append(name)
    error = "; ".join(errors)
    if error:
        log.warning("alert %s, attempt %s, not delivered: %s", alert.id, alert.attempt, error)
    return _record(alert, delivered, error) and not error


def _process_callback(alert: Leased) -> bool:
    """An agent's callback goes to its own URL only. Unlike an operator's alert it is given up
    after CALLBACK_ATTEMPTS (the effect itself stays readable, also by long poll): an agent
    that went away must not keep the sender busy for ever."""
    try:
        send_callback(alert)
    except Exception as exc:  # refused, unreachable, refused by the receiver, or anything else
        return _failed(alert, _describe(exc))
    return _record(alert, ["callback"])


def _failed(alert: Leased, error: str) -> bool:
    """One failed attempt of this row: backoff, or (a callback's last try) given up."""
    if alert.kind == AlertKind.CALLBACK and alert.attempt >= CALLBACK_ATTEMPTS:
        log.warning("callback %s given up after %s attempts: %s", alert.id, alert.attempt, error)
        _record(alert, ["abandoned"], note=f"given up: {error}")
        return False
    log.warning("%s %s, attempt %s, not delivered: %s", alert.kind, alert.id, alert.attempt, error)
    _record(alert, [], error)
    return False


def _record(alert: Leased, delivered: list[str], error: str = "", *, note: str = "") -> bool:
    """`finish` in a savepoint of its own (a statement that fails must not abort a caller's
    transaction); if even that fails, the row is held back by `back_off`, and if that fails
    too, its lease (LEASE_SECONDS) runs out by itself: the run goes on either way."""
    try:
        with transaction.atomic():
            return finish(alert, delivered, error, note=note)
    except Exception:
        log.exception("alert %s: its result could not be recorded", alert.id)
    try:
        with transaction.atomic():
            back_off(alert)
    except Exception:
        log.exception("alert %s: not even its backoff could be recorded", alert.id)
    return False


def _deliver(alert: Leased) -> bool:
    """process_one, with every exception it lets out made a failed attempt of this row."""
    try:
        return process_one(alert)
    except Exception as exc:
        return _failed(alert, _describe(exc))


def send_due(budget: float = TIME_BUDGET) -> dict[str, int]:
    """Send due alerts one at a time until none is left or the time budget is spent."""
    deadline = time.monotonic() + budget
    result = {"sent": 0, "failed": 0}
    while time.monotonic() < deadline:
        taken = lease(1)
        if not taken:
            break
        result["sent" if _deliver(taken[0]) else "failed"] += 1
    if any(result.values()):
        log.info("alert sender: %s", result)
    return result
