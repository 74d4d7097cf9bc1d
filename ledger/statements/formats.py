"""Statements in a provider's own report format, besides the ledger's own columns.

A provider's report (Stripe's itemized balance change report, say) is read by its
`ReportFormat`: a reader that turns the report's lines, with their own columns, signs, types
and references, into the ledger's line values and hands each to the `LineReader`, which
checks it as it checks any line and names the line and column of any fault. Formats are
registered by the provider adapters that know them (`reconcilers.providers`), and a tool
names its provider's format in `statement_format`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.statements.parse import LineReader, Row


@dataclass(frozen=True)
class ReportFormat:
    name: str
    # The unit of the report's amounts, whatever the tool's requests use ("major"/"minor").
    amount_unit: str
    # Reads the report's text (UTF-8, newlines as they are) into validated rows.
    rows: Callable[[IO[str], LineReader], Iterator[Row]]


REPORT_FORMATS: dict[str, ReportFormat] = {}


def register(report: ReportFormat) -> None:
    """Make a format known by its name (idempotent; a name means one format)."""
    known = REPORT_FORMATS.setdefault(report.name, report)
    if known is not report and known.rows is not report.rows:
        raise ValueError(f"report format {report.name!r} is registered already")


def named(name: str) -> ReportFormat | None:
    return REPORT_FORMATS.get(name) if name else None
