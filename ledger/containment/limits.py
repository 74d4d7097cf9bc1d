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

This module keeps what Python must know before the claim: reading a request's amount at the
tool's paths (an intent without one is 422), and minor units (ISO 4217 exponents; the trigger
has a copy, tests/test_limits_trigger.py checks that they agree). Amounts compare as integer
minor units, never floats.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import DatabaseError, connection

from ledger.containment.iso4217 import EXPONENTS as ISO_EXPONENTS
from ledger.containment.outbox import notify
from ledger.errors import LedgerError, ValidationFailed
from ledger.models import AmountCharge
from ledger.observability.metrics import count_limit_refusal

_CHARGES = AmountCharge._meta.db_table
# What the claim trigger raises (SQLSTATE P0001, the limit as JSON in DETAIL).
TRIGGER_MESSAGE = "ledger_limit_exceeded"
# ISO 4217 minor-unit exponents that differ from 2 (`ledger.containment.iso4217`, the one table);
# any
# other currency has 2. The claim trigger's `ledger_currency_exponent` is a frozen copy
# (migrations 0014 and 0021), which tests/test_limits_trigger.py compares with this.
EXPONENTS = {code: places for code, places in ISO_EXPONENTS.items() if places not in (2, None)}
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


@dataclass(frozen=True)
class Money:
    currency: str
    minor: int


def exponent(currency: str) -> int:
    return EXPONENTS.get(currency, 2)


def to_minor(amount: Any, currency: str) -> int:
    """An exact amount in major units ("12.50", 12, a Decimal) as integer minor units; a value
    with more decimal places than the currency has is refused, never rounded."""
    if isinstance(amount, bool) or not isinstance(amount, int | str | Decimal):
        raise ValueError("must be a number or a decimal string")
    try:
        value = Decimal(amount)
    except InvalidOperation:
        raise ValueError("must be a number or a decimal string") from None
    if not value.is_finite() or value < 0 or abs(value.adjusted()) > 30:
        raise ValueError("must be a non-negative amount")
    minor = value.scaleb(exponent(currency))
    if minor != minor.to_integral_value():
        raise ValueError(f"has more decimal places than {currency} allows ({exponent(currency)})")
    return int(minor)


def currency_code(value: Any) -> str:
    if not isinstance(value, str) or len(value) != 3 or not value.isalpha():
        raise ValueError("must be a three-letter ISO 4217 code")
    return value.upper()


def amount_limits(raw: Any) -> dict[str, int]:
    """A declared amount limit ({"EUR": "500.00"}) as {currency: minor units}."""
    if not isinstance(raw, Mapping):
        raise ValueError('must be a table of currency = "amount"')
    limits = {}
    for currency, amount in raw.items():
        code = currency_code(currency)
        limits[code] = to_minor(amount, code)
    return limits


def required_paths(fields: Mapping[str, Any]) -> list[str]:
    """The path settings a tool declaration lacks: a tool with limits or `approve_above` must
    say where its requests hold the amount and currency. Empty when nothing is missing."""
    needs = (
        any(fields.get(name) for name in ("limit_claims_per_minute", "limit_amount_per_day"))
        or fields.get("approve_above") is not None
    )
    if not needs:
        return []
    return [name for name in ("amount_path", "currency_path") if not fields.get(name)]


def value_at(request: Any, path: str) -> Any:
    """The value at a dotted path into a request ("payment.amount"), or None."""
    value = request
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def amount_of(policy: Any, request: Any) -> Money | None:
    """The request's amount, read at the tool's paths; None for a tool that declares none. A
    missing or unreadable amount or currency is 422 naming the field (`request.<path>`), and its
    detail says which of the two it is."""
    if not policy.amount_path or not policy.currency_path:
        return None
    paths = {"amount": policy.amount_path, "currency": policy.currency_path}
    missing = [what for what, path in paths.items() if value_at(request, path) is None]
    if missing:
        fields = [f"request.{paths[what]}" for what in missing]
        raise ValidationFailed(
            f"Tool {policy.name!r} needs the request's {' and '.join(missing)} "
            f"({' and '.join(fields)} {'is' if len(missing) == 1 else 'are'} missing).",
            {field: f"the {what} is required" for field, what in zip(fields, missing, strict=True)},
        )
    problems = _money_problems(policy, request)
    if problems:
        wrong = [what for what, path in paths.items() if f"request.{path}" in problems]
        raise ValidationFailed(
            f"Tool {policy.name!r} cannot use the request's {' and '.join(wrong)} "
            f"({' and '.join(problems)}).",
            problems,
        )
    currency = currency_code(value_at(request, policy.currency_path))
    return Money(currency, to_minor(value_at(request, policy.amount_path), currency))


def _money_problems(policy: Any, request: Any) -> dict[str, str]:
    """What is wrong with a request's amount and currency, both present, by field."""
    problems = {}
    currency = ""
    try:
        currency = currency_code(value_at(request, policy.currency_path))
    except ValueError as exc:
        problems[f"request.{policy.currency_path}"] = f"the currency {exc}"
    if currency:
        try:
            to_minor(value_at(request, policy.amount_path), currency)
        except ValueError as exc:
            problems[f"request.{policy.amount_path}"] = f"the amount {exc}"
    if (
        currency
        and not problems
        and policy.limit_amount_per_day
        and currency not in policy.limit_amount_per_day
    ):
        allowed = ", ".join(sorted(policy.limit_amount_per_day))
        problems[f"request.{policy.currency_path}"] = (
            f"tool {policy.name!r} limits amounts in {allowed} only"
        )
    return problems


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
