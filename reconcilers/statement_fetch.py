"""Fetching the provider's own record: an adapter's `fetch_statement(period_start, period_end)`
brings back a statement file, and a daily django-q2 schedule (`fetch_due_statements`) imports
yesterday's for every tool that declares `fetch_statements = true`.

A fetched statement is imported as **final**: the provider's record of a whole past UTC day is
complete, so it settles what a lookup cannot (`ledger.statements`). A day already imported is
left alone, so the schedule may run as often as it likes.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from ledger.effects.recovery import database_now
from ledger.models import Tool
from ledger.models.statements import Origin
from ledger.statements import already_imported, import_statement
from reconcilers.providers import adapter_for

log = logging.getLogger(__name__)

ACTOR = "system:statements"


def previous_day(now: datetime) -> tuple[datetime, datetime]:
    """The last full UTC day before `now`: [yesterday 00:00, today 00:00)."""
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=1), today


def fetch_due_statements() -> dict[str, Any]:
    """For every tool that fetches its statements: yesterday's, through the tool's adapter,
    imported as final unless final statements cover that day already (fetched, uploaded or
    imported by hand). One tool's failure (a provider down, a file the importer refuses) is
    logged and reported; the others go on, and the next run that day tries again. A day
    missed altogether is imported by hand (`importstatement`)."""
    period_start, period_end = previous_day(database_now())
    result: dict[str, Any] = {"imported": [], "already_imported": [], "failed": {}}
    for tool in Tool.objects.filter(fetch_statements=True).order_by("name"):
        if already_imported(tool.name, period_start, period_end):
            result["already_imported"].append(tool.name)
            continue
        adapter = adapter_for(tool)
        fetch = getattr(adapter, "fetch_statement", None)
        if fetch is None:
            result["failed"][tool.name] = f"adapter {adapter.name!r} cannot fetch statements"
            continue
        try:
            filename, content = fetch(period_start, period_end)
            import_statement(
                tool.name,
                content,
                filename=filename,
                period_start=period_start,
                period_end=period_end,
                provisional=False,
                by=ACTOR,
                origin=Origin.FETCH.value,
            )
        except Exception as exc:
            # A provider down or a statement the importer refuses must not stop the others.
            log.exception("statement of %s for %s could not be imported", tool.name, period_start)
            result["failed"][tool.name] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        result["imported"].append(tool.name)
    log.info("statement fetch for %s: %s", period_start.date(), result)
    return result
