"""Amounts as the sandbox payments provider keeps them: exact integer minor units (cents),
parsed from and shown as decimal strings in major units. Every currency is treated as having
two decimal places."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from devstack.sandbox.service import HttpError

MAX_AMOUNT = Decimal("99999999.99")  # what a card network would accept in one charge
CENTS = Decimal("0.01")
_AMOUNT = re.compile(r"\d+(\.\d+)?")


def invalid(message: str) -> HttpError:
    return HttpError(400, "invalid_request", message)


def parse_amount(value: Any) -> int:
    """ "10.00", 10, 10.0 (as a Decimal) → 1000 minor units; anything else is a 400."""
    if isinstance(value, str) and _AMOUNT.fullmatch(value):
        value = Decimal(value)
    # bool is an int in Python, but `true` is not an amount.
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise invalid('`amount` must be a decimal number or a string like "10.00".')
    amount = Decimal(value)
    if not amount.is_finite() or amount <= 0 or amount > MAX_AMOUNT:
        raise invalid(f"`amount` must be more than 0 and at most {MAX_AMOUNT}.")
    try:
        cents = amount.quantize(CENTS)
    except InvalidOperation:
        raise invalid("`amount` is out of range.") from None
    # Compared exactly: a third decimal place is refused, never rounded away.
    if cents != amount:
        raise invalid("`amount` has more than two decimal places.")
    return int(cents * 100)


def format_amount(minor: int) -> str:
    return f"{minor // 100}.{minor % 100:02d}"
