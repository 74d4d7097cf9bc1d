"""Money in a request, as a tool declares it: the amount and currency read at the tool's paths
(`amount_path`, `currency_path`), exact minor units by ISO 4217 exponents (`iso4217`, the one
table), and the declared amounts of a tool file (limits per currency, the `approve_above`
threshold). Amounts compare as integer minor units, never floats. The limits that count these
amounts are `ledger.rules.limits`; four-eyes is `ledger.rules.four_eyes`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from ledger.errors import ValidationFailed
from ledger.policy.iso4217 import EXPONENTS as ISO_EXPONENTS

# ISO 4217 minor-unit exponents that differ from 2 (`ledger.policy.iso4217`, the one table);
# any
# other currency has 2. The claim trigger's `ledger_currency_exponent` is a frozen copy
# (migrations 0014 and 0021), which tests/test_limits_trigger.py compares with this.
EXPONENTS = {code: places for code, places in ISO_EXPONENTS.items() if places not in (2, None)}


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


def threshold(raw: Any) -> Decimal:
    """A declared `approve_above` ("1000.00", 1000) as an exact decimal; floats are refused,
    since 0.1 is not what the declaration meant."""
    if isinstance(raw, bool) or not isinstance(raw, int | str | Decimal):
        raise ValueError('must be an integer or a decimal string such as "1000.00"')
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ValueError('must be an integer or a decimal string such as "1000.00"') from None
    if not value.is_finite() or value < 0:
        raise ValueError("must be a non-negative amount")
    return value
