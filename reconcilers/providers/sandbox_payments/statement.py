"""The sandbox payments provider's statement of a period, fetched as CSV (`GET /statements`)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from reconcilers.providers.base import http_client
from reconcilers.providers.outcomes import StatementFetchError


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def fetch_sandbox_statement(
    base_url: str, period_start: datetime, period_end: datetime, *, timeout: float
) -> tuple[str, bytes]:
    """The sandbox payments provider's statement of [period_start, period_end), as CSV:
    a file name (its extension tells the importer the format) and the content."""
    try:
        response = http_client().get(
            f"{base_url.rstrip('/')}/statements",
            params={"from": _iso(period_start), "to": _iso(period_end), "format": "csv"},
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        raise StatementFetchError(f"provider unreachable: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise StatementFetchError(f"provider answered {response.status_code}")
    stamp = f"{period_start.astimezone(UTC):%Y%m%dT%H%M%SZ}"
    return f"statement-{stamp}-{period_end.astimezone(UTC):%Y%m%dT%H%M%SZ}.csv", response.content
