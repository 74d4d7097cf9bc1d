"""Limits: at most N claims per calendar minute and at most an amount per rolling 24 hours, per
tool (declared in tools.toml) and per agent (set by an admin), checked inside the claim's own
transaction so that a limit is never exceeded, not even by one.

Claims per minute: a counter row per (scope, minute) in `LimitCounter`, created by
`INSERT … ON CONFLICT DO NOTHING` and raised by `UPDATE … SET used = used + 1 WHERE … AND
used + 1 <= max`. Concurrent claims under the same limit queue on that row's lock, and
PostgreSQL re-checks the condition against the row as the previous holder committed it.

Amount per rolling 24 h: one `AmountCharge` row per (effect, limit), and the check sums the
limit's charges of the last 24 hours. Counter rows per hour would make the window 24 to 25
hours long and could not tell which bucket to release an effect's amount from; a row per
effect is exact (a truly rolling window), counts an amount once per effect (its unique
constraint) and is simply deleted on a proof of non-receipt. The sum is ordered by a lock on
a per-(scope, currency) `LimitCounter` row (period "24h"), taken in a statement of its own
before the summing INSERT, whose snapshot therefore sees every charge committed by the
previous holder. Only claims under the same limit and currency wait for each other.

Order: the tool's limits before the agent's, minute before amount, so two claims never take
the same locks in opposite orders. All of it runs in a savepoint with the claim itself: a
refusal by the agent's limit, or a claim that loses its race, takes back what the tool's
limit had counted. A refusal enqueues one `limit_exceeded` alert per (limit, window).

Amounts compare as integer minor units of their currency (ISO 4217 exponent), never floats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import connection, transaction

from ledger.errors import LedgerError, ValidationFailed
from ledger.jsonenc import ExactJSONDecoder
from ledger.models import Agent, AmountCharge, Effect, LimitCounter
from ledger.outbox import notify

_COUNTERS = LimitCounter._meta.db_table
_CHARGES = AmountCharge._meta.db_table
_AGENTS = Agent._meta.db_table
DAY_SECONDS = 86400
# ISO 4217 minor-unit exponents that differ from 2; any other currency has 2.
_EXPONENTS = {
    "BHD": 3, "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "IQD": 3, "ISK": 0, "JOD": 3, "JPY": 0,
    "KMF": 0, "KRW": 0, "KWD": 3, "LYD": 3, "OMR": 3, "PYG": 0, "RWF": 0, "TND": 3, "UGX": 0,
    "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
}  # fmt: skip
# Transitions that prove the request never reached the provider: its amount is released.
NON_RECEIPT = frozenset({"not_sent", "never_received", "never_sent"})
# The minute a claim counts in, by the transaction's clock, as text (the counter's period).
_MINUTE = "to_char(date_trunc('minute', now() AT TIME ZONE 'UTC'), 'YYYY-MM-DD\"T\"HH24:MI\"Z\"')"
_HOUR = "to_char(date_trunc('hour', now() AT TIME ZONE 'UTC'), 'YYYY-MM-DD\"T\"HH24\"Z\"')"


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
    return _EXPONENTS.get(currency, 2)


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


def _at(request: Any, path: str) -> Any:
    value = request
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def amount_of(policy: Any, request: Any) -> Money | None:
    """The request's amount, read at the tool's paths; None for a tool that declares none. A
    missing or unreadable amount or currency is 422 naming the field (`request.<path>`)."""
    if not policy.amount_path or not policy.currency_path:
        return None
    problems = {}
    currency = ""
    try:
        currency = currency_code(_at(request, policy.currency_path))
    except ValueError as exc:
        problems[f"request.{policy.currency_path}"] = f"the currency {exc}"
    minor = 0
    if currency:
        raw = _at(request, policy.amount_path)
        try:
            if raw is None:
                raise ValueError("is required")
            minor = to_minor(raw, currency)
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
    if problems:
        raise ValidationFailed(f"Tool {policy.name!r} needs the request's amount.", problems)
    return Money(currency, minor)


@dataclass(frozen=True)
class _Scope:
    key: str  # "tool:<name>" / "agent:<id>": the counters' scope
    shown: str  # "tool:<name>" / "agent:<name>": what people read
    per_minute: int | None
    per_day: Mapping[str, int]


class _Over(Exception):
    def __init__(self, refusal: LimitExceeded) -> None:
        self.refusal = refusal


class _Lost(Exception):
    """The claim itself lost its race: undo what the limits counted for it."""


def _scopes(effect: Effect, policy: Any) -> list[_Scope]:
    scopes = []
    if policy.limit_claims_per_minute or policy.limit_amount_per_day:
        scopes.append(
            _Scope(
                f"tool:{policy.name}",
                f"tool:{policy.name}",
                policy.limit_claims_per_minute,
                policy.limit_amount_per_day,
            )
        )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT name, limit_claims_per_minute, limit_amount_per_day FROM {_AGENTS} "
            "WHERE id = %s AND (limit_claims_per_minute IS NOT NULL "
            "OR limit_amount_per_day <> '{}'::jsonb)",
            [effect.agent_id],
        )
        row = cursor.fetchone()
    if row is not None:
        # Django has psycopg hand jsonb over as text.
        raw = row[2] if isinstance(row[2], Mapping) else json.loads(row[2], cls=ExactJSONDecoder)
        scopes.append(
            _Scope(f"agent:{effect.agent_id}", f"agent:{row[0]}", row[1], amount_limits(raw))
        )
    return scopes


def _refusal(
    scope: _Scope,
    what: str,
    current: int,
    maximum: int,
    retry_after: int,
    window: str,
    currency: str = "",
) -> LimitExceeded:
    which = f"{scope.shown}:{what}" + (f":{currency}" if currency else "")
    limit: dict[str, Any] = {
        "which": which,
        "current": current,
        "max": maximum,
        "retry_after": retry_after,
    }
    if currency:
        limit["currency"] = currency
        limit["current"] = _major(current, currency)
        limit["max"] = _major(maximum, currency)
    detail = (
        f"Limit {which} reached: {limit['current']} of {limit['max']}; retry in {retry_after} s."
    )
    refusal = LimitExceeded(detail, limit=limit, retry_after=retry_after)
    refusal.alert_key = f"{which}:{window}"
    return refusal


def _major(minor: int, currency: str) -> str:
    return str(Decimal(minor).scaleb(-exponent(currency)))


def _count_claim(cursor: Any, scope: _Scope) -> None:
    assert scope.per_minute is not None
    cursor.execute(
        f"INSERT INTO {_COUNTERS} (scope, period, currency, used) VALUES (%s, {_MINUTE}, '', 0) "
        "ON CONFLICT (scope, period, currency) DO NOTHING",
        [scope.key],
    )
    cursor.execute(
        f"UPDATE {_COUNTERS} SET used = used + 1 WHERE scope = %s AND period = {_MINUTE} "
        "AND currency = '' AND used + 1 <= %s RETURNING used",
        [scope.key, scope.per_minute],
    )
    if cursor.fetchone() is not None:
        return
    cursor.execute(
        f"SELECT used, {_MINUTE}, 60 - floor(extract(second FROM now()))::int FROM {_COUNTERS} "
        f"WHERE scope = %s AND period = {_MINUTE} AND currency = ''",
        [scope.key],
    )
    used, minute, retry_after = cursor.fetchone()
    refusal = _refusal(scope, "claims_per_minute", used, scope.per_minute, retry_after, minute)
    raise _Over(refusal)


def _charge(cursor: Any, scope: _Scope, effect: Effect, money: Money) -> None:
    maximum = scope.per_day.get(money.currency)
    if maximum is None:
        return  # this scope caps other currencies only
    cursor.execute(
        f"SELECT 1 FROM {_CHARGES} WHERE effect_id = %s AND scope = %s", [effect.id, scope.key]
    )
    if cursor.fetchone() is not None:
        return  # counted once per effect: a retry of the same effect adds nothing
    cursor.execute(
        f"INSERT INTO {_COUNTERS} (scope, period, currency, used) VALUES (%s, '24h', %s, 0) "
        "ON CONFLICT (scope, period, currency) DO NOTHING",
        [scope.key, money.currency],
    )
    # A statement of its own: the summing INSERT below then takes a snapshot after the lock.
    cursor.execute(
        f"SELECT 1 FROM {_COUNTERS} WHERE scope = %s AND period = '24h' AND currency = %s "
        "FOR UPDATE",
        [scope.key, money.currency],
    )
    cursor.execute(
        f"INSERT INTO {_CHARGES} (effect_id, scope, currency, amount_minor, charged_at) "
        "SELECT %s, %s, %s, %s, now() WHERE %s + (SELECT coalesce(sum(amount_minor), 0) "
        f"FROM {_CHARGES} WHERE scope = %s AND currency = %s "
        "AND charged_at > now() - interval '24 hours') <= %s "
        "ON CONFLICT (effect_id, scope) DO NOTHING RETURNING id",
        [effect.id, scope.key, money.currency, money.minor, money.minor, scope.key,
         money.currency, maximum],
    )  # fmt: skip
    if cursor.fetchone() is not None:
        return
    cursor.execute(
        f"SELECT amount_minor, extract(epoch FROM charged_at + interval '24 hours' - now()) "
        f"FROM {_CHARGES} WHERE scope = %s AND currency = %s "
        "AND charged_at > now() - interval '24 hours' ORDER BY charged_at",
        [scope.key, money.currency],
    )
    rows = cursor.fetchall()
    used = sum(row[0] for row in rows)
    cursor.execute(f"SELECT {_HOUR}")
    hour = cursor.fetchone()[0]
    # When enough of the oldest charges have left the window for this amount to fit.
    retry_after, left = DAY_SECONDS, used
    for amount, expires_in in rows:
        if money.minor > maximum:
            break
        left -= amount
        if left + money.minor <= maximum:
            retry_after = max(1, math.ceil(expires_in))
            break
    refusal = _refusal(scope, "amount_per_day", used, maximum, retry_after, hour, money.currency)
    raise _Over(refusal)


def claim_within_limits(
    effect: Effect, policy: Any, claim: Callable[[], Effect | None]
) -> tuple[Effect | None, LimitExceeded | None]:
    """Run `claim` (the transition itself) after counting it against every limit that applies,
    inside the caller's transaction. Returns (moved effect or None, refusal or None)."""
    scopes = _scopes(effect, policy)
    if not scopes:
        return claim(), None
    money = amount_of(policy, effect.request) if any(s.per_day for s in scopes) else None
    try:
        # A savepoint: a refusal or a lost race takes back the counts taken before it.
        with transaction.atomic(), connection.cursor() as cursor:
            for scope in scopes:
                if scope.per_minute is not None:
                    _count_claim(cursor, scope)
                if money is not None:
                    _charge(cursor, scope, effect, money)
            moved = claim()
            if moved is None:
                raise _Lost
    except _Lost:
        return None, None
    except _Over as over:
        # In the claim's transaction, which commits (the refusal is raised after it); the API
        # enqueues it again for an intent posted with its claim, which rolls back whole.
        over.refusal.alert()
        return None, over.refusal
    return moved, None


def release(effect_id: Any) -> None:
    """A proof of non-receipt: the effect's amount no longer counts against any limit."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {_CHARGES} WHERE effect_id = %s", [effect_id])
