"""Limits: at most N claims per calendar minute and at most an amount per rolling 24 hours, per
tool (declared in tools.toml) and per agent (set by an admin), so that a limit is never
exceeded, not even by one.

PostgreSQL enforces them: a trigger on every claim (`planned → dispatching`, or an effect
inserted `dispatching`) counts it, in the claim's own statement, whichever process makes it
(migration 0014 holds the SQL and the reasoning). In short:

- claims per minute: a counter row per (scope, minute) raised by a conditional UPDATE
  (`used + 1 <= max`), so only claims under the same limit wait for each other;
- amount per rolling 24 h: one `AmountCharge` row per (effect, limit), summed over the last
  24 hours under a lock on a per-(scope, currency) row. A row per effect makes the window truly
  rolling, counts an amount once per effect, and is deleted on a proof of non-receipt
  (`release`);
- the tool's limits before the agent's, minute before amount: locks are always taken in the
  same order.

A refusal raises `ledger_limit_exceeded`; the statement, with every count it took, rolls back,
and `refusal_from_trigger` turns it into the 429. The caller enqueues one `limit_exceeded` alert
per (limit, window) once its transaction is over (`LimitExceeded.alert`).

What Python must know before the claim, a request's amount at the tool's paths (an intent
without one is 422) in minor units, is `ledger.policy.money` (ISO 4217 exponents; the trigger
has a copy, tests/test_limits_trigger.py checks that they agree). This module turns the
trigger's refusal into the 429 and releases an amount on a proof of non-receipt.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django.db import DatabaseError, connection

from ledger.errors import LedgerError
from ledger.models import AmountCharge
from ledger.observability.metrics import count_limit_refusal
from ledger.policy.money import exponent
from ledger.rules.outbox import notify

_CHARGES = AmountCharge._meta.db_table
# What the claim trigger raises (SQLSTATE P0001, the limit as JSON in DETAIL).
TRIGGER_MESSAGE = "ledger_limit_exceeded"
# Transitions that prove the request never reached the provider: its amount is released.
NON_RECEIPT = frozenset({"not_sent", "never_received", "never_sent"})


class LimitExceeded(LedgerError):
    """A claim would pass a limit: 429, with `limit` (which, current, max, retry_after)."""

    status, code = 429, "limit_exceeded"
    # One alert per (limit, window): "<which>:<minute or hour>".
    alert_key = ""

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.extra["retry_after"])}

    def alert(self) -> None:
        """Enqueue the breach's alert (a no-op when this window's exists already)."""
        notify("limit_exceeded", self.alert_key, self.body())


def refusal_from_trigger(exc: DatabaseError) -> LimitExceeded | None:
    """The 429 for the claim trigger's `ledger_limit_exceeded` (migration 0014), or None for
    any other database error. DETAIL holds the limit; amounts in minor units."""
    diag = getattr(exc.__cause__, "diag", None)
    if diag is None or diag.message_primary != TRIGGER_MESSAGE:
        return None
    raw = json.loads(diag.message_detail or "{}")
    currency = raw.get("currency") or ""
    current, maximum = raw.get("current") or 0, raw.get("max") or 0
    if currency:
        current, maximum = _major(current, currency), _major(maximum, currency)
    which, retry_after = raw.get("which", ""), int(raw.get("retry_after") or 60)
    count_limit_refusal(*refusal_labels(which))
    limit: dict[str, Any] = {
        "which": which,
        "current": current,
        "max": maximum,
        "retry_after": retry_after,
    }
    if currency:
        limit["currency"] = currency
    detail = f"Limit {which} reached: {current} of {maximum}; retry in {retry_after} s."
    refusal = LimitExceeded(detail, limit=limit, retry_after=retry_after)
    # One alert per (limit, window): the minute for claims, the hour for amounts.
    refusal.alert_key = f"{which}:{raw.get('window', '')}"
    return refusal


def refusal_labels(which: str) -> tuple[str, str]:
    """The metric's (scope, kind) of a refused limit, from the trigger's `which`:
    "tool:<name>:claims_per_minute" or "agent:<name>:amount_per_day:<currency>". Names never
    become labels (agents' names are many); anything unexpected is "other"."""
    scope = which.partition(":")[0]
    if which.endswith(":claims_per_minute"):
        kind = "claims_per_minute"
    elif which.rsplit(":", 2)[-2:-1] == ["amount_per_day"]:
        kind = "amount_per_day"
    else:
        kind = "other"
    return (scope if scope in ("tool", "agent") else "other"), kind


def _major(minor: int, currency: str) -> str:
    return str(Decimal(minor).scaleb(-exponent(currency)))


def release_sql(effect_ids: str) -> str:
    """SQL: a proof of non-receipt for the effects `effect_ids` (a SQL expression giving their
    ids) — their amounts no longer count against any limit."""
    return f"DELETE FROM {_CHARGES} WHERE effect_id IN ({effect_ids})"


def release(effect_id: Any) -> None:
    """A proof of non-receipt: the effect's amount no longer counts against any limit."""
    with connection.cursor() as cursor:
        cursor.execute(release_sql("%s"), [effect_id])
