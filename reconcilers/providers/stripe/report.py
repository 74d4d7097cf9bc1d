"""Stripe's itemized balance change report, read as Stripe writes it.

The report is the CSV of the Reporting API's report type
`balance_change_from_activity.itemized.3` (Dashboard: Balance summary, "Balance change from
activity", itemized): one line per balance transaction, amounts in major units with Stripe's
sign, times in UTC as `YYYY-MM-DD HH:MM:SS`. Besides the report's default columns it needs
three optional ones, which `reporting.COLUMNS` asks for: `payment_intent_id`, and the
effect's idempotency key as the payment's and the refund's metadata,
`payment_metadata[ledger_key]` and `refund_metadata[ledger_key]`. A report without them
cannot be matched to any effect and is refused at its header.

Each line becomes a statement line:

| statement column | from the report                                                        |
| ---------------- | ---------------------------------------------------------------------- |
| provider_ref     | a charge's `payment_intent_id` (its `source_id` when it has none); a    |
|                  | refund's `source_id` (`re_…`): what the adapter records for each       |
| reference        | `payment_metadata[ledger_key]`, for refunds `refund_metadata[...]`     |
| amount           | `gross`, as a magnitude (refunds and reversals are negative in Stripe) |
| currency         | `currency`, upper-cased                                                |
| status           | succeeded: a balance transaction is money that moved                   |
| occurred_at      | `created_utc`, in UTC                                                  |
| type             | from `reporting_category` (below)                                      |

`reporting_category` → type: `charge` → charge, `refund` → refund,
`partial_capture_reversal` → reversal (the uncaptured part of an authorization given back),
`fee` → fee, and `refund_failure` → a *failed* refund line under the refund's id, kept on the
refund's effect (the refund's successful line, if any statement holds one, still settles it).
Every other category (payouts, transfers, disputes, adjustments, top-ups, reserves, tax, …)
is money no agent's effect moves: such lines are skipped, neither stored nor refused, so that
a day with a payout still imports. A line is otherwise checked like any statement line, and
any fault refuses the whole report, naming the line and the report's column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import IO

from ledger.statements.formats import ReportFormat
from ledger.statements.parse import LineReader, Row, StatementError

NAME = "stripe_itemized_balance_change"
REPORT_TYPE = "balance_change_from_activity.itemized.3"
# The metadata key under which the adapter sends an effect's idempotency key to Stripe.
METADATA_KEY = "ledger_key"
PAYMENT_KEY = f"payment_metadata[{METADATA_KEY}]"
REFUND_KEY = f"refund_metadata[{METADATA_KEY}]"
# The columns a line is read from, every one required in the header.
READ = (
    "created_utc",
    "currency",
    "gross",
    "reporting_category",
    "source_id",
    "payment_intent_id",
    PAYMENT_KEY,
    REFUND_KEY,
)
# reporting_category → (type, status) of the statement line; any other category is skipped.
CATEGORIES = {
    "charge": ("charge", "succeeded"),
    "refund": ("refund", "succeeded"),
    "partial_capture_reversal": ("reversal", "succeeded"),
    "fee": ("fee", "succeeded"),
    "refund_failure": ("refund", "failed"),
}
# Lines whose provider ref is the payment intent (what the adapter records for a charge).
_BY_INTENT = frozenset({"charge", "partial_capture_reversal"})
_REFUNDS = frozenset({"refund", "refund_failure"})
# The ledger's columns, named as the report names them, for the reader's fault messages.
SHOWN = {
    "provider_ref": "source_id",
    "reference": PAYMENT_KEY,
    "amount": "gross",
    "currency": "currency",
    "status": "reporting_category",
    "occurred_at": "created_utc",
    "type": "reporting_category",
}


def _header(lines: Iterator[list[str]]) -> tuple[int, list[int]]:
    """The header's width and the positions of the columns read (or a refusal naming line 1)."""
    try:
        header = [name.strip() for name in next(lines)]
    except StopIteration:
        raise StatementError("line 1: the report is empty (it starts with a header)") from None
    except csv.Error as exc:
        raise StatementError(f"line 1: not CSV ({exc})") from None
    missing = [name for name in READ if name not in header]
    if missing:
        raise StatementError(
            f"line 1: missing column(s) {', '.join(map(repr, missing))}: the report is "
            f"{REPORT_TYPE} with the columns the ledger asks for (docs/providers/stripe.md)"
        )
    return len(header), [header.index(name) for name in READ]


def rows(text: IO[str], reader: LineReader) -> Iterator[Row]:
    """The report's lines as validated statement rows, in file order (skipped categories
    aside). Line numbers are the file's."""
    reader.names = {**reader.names, **SHOWN}
    lines = csv.reader(text, strict=True)
    width, (at, cur, gross, cat, source, intent, paid, refunded) = _header(lines)
    categories = CATEGORIES
    while True:
        try:
            values = next(lines)
        except StopIteration:
            return
        except csv.Error as exc:
            raise StatementError(f"line {lines.line_num}: not CSV ({exc})") from None
        if len(values) != width:
            if not values:
                continue  # a blank line
            raise StatementError(
                f"line {lines.line_num}: {len(values)} values where the header has {width}"
            )
        category = values[cat]
        kind = categories.get(category)
        if kind is None:
            continue
        amount = values[gross]
        if category in _REFUNDS:
            ref, reference = values[source], values[refunded]
        else:
            ref = (values[intent] if category in _BY_INTENT else "") or values[source]
            reference = values[paid]
        if amount[:1] == "-" and kind[0] != "charge":
            amount = amount[1:]  # Stripe's sign of money going back; the ledger stores magnitudes
        moment = values[at]
        yield reader.row(
            lines.line_num,
            [ref, reference, amount, values[cur], kind[1], moment + "+00:00" if moment else "",
             kind[0]],
        )  # fmt: skip


REPORT = ReportFormat(name=NAME, amount_unit="major", rows=rows)
