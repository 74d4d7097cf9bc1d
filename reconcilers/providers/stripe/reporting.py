"""Fetching Stripe's itemized balance change report of a period through its Reporting API.

`fetch_statement(config, mode, period_start, period_end) -> (filename, content)`, with the
official SDK (`stripe.StripeClient`, `v1.reporting`):

1. the report type's `data_available_end` must reach the period's end (Stripe prepares its
   balance data hours after the fact: until it does, the fetch is refused and the daily
   schedule tries again);
2. a report run of `balance_change_from_activity.itemized.3` over [interval_start,
   interval_end), whole seconds covering the period, with the columns `report` reads
   (`COLUMNS`);
3. the run is polled every `report_poll` seconds (default 5) until it succeeds, for at most
   `report_wait` seconds (default 300); each call waits `timeout` seconds at most;
4. its result file is downloaded from its `url` with the secret key, only from Stripe's files
   host (`files_base`; by default `https://files.stripe.com`, or the adapter's `base_url`
   where the tool points it at another server, such as the sandbox), within
   `report_timeout` seconds (default 120).

Anything short of the file (the SDK's errors, a failed or still pending run, a download that
is not 200) raises `StatementFetchError`; nothing is imported then. The secret key comes from
the environment variable the configuration names at `api_key_env` (`reconcilers.providers
.base.secret`).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from reconcilers.providers.base import http_client, secret
from reconcilers.providers.outcomes import StatementFetchError
from reconcilers.providers.stripe.report import PAYMENT_KEY, REFUND_KEY, REPORT_TYPE

FILES_BASE = "https://files.stripe.com"
# The report's default columns, then those that let the ledger match a line to its effect.
COLUMNS = (
    "balance_transaction_id", "created_utc", "available_on_utc", "currency", "gross", "fee",
    "net", "reporting_category", "source_id", "description", "charge_id", "payment_intent_id",
    PAYMENT_KEY, REFUND_KEY,
)  # fmt: skip
_LONGEST_WAIT = 3600.0


def _seconds(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return default
    return min(float(value), _LONGEST_WAIT)


def _timeout(config: dict[str, Any], key: str = "timeout", default: float = 30.0) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 600:
        return default
    return float(value)


def client(config: dict[str, Any], mode: str) -> Any:
    """A StripeClient for the tool's mode, its secret key read from the environment."""
    import stripe

    key = secret(config, "api_key", mode)
    if not key:
        raise StatementFetchError("no Stripe secret key: set the variable api_key_env names")
    bases = {}
    if isinstance(config.get("base_url"), str) and config["base_url"]:
        bases["api"] = config["base_url"].rstrip("/")
    return stripe.StripeClient(
        key,
        base_addresses=bases,  # type: ignore[arg-type]
        max_network_retries=2,
        http_client=stripe.RequestsClient(timeout=_timeout(config)),
    )


def files_base(config: dict[str, Any]) -> str:
    """Where the report's file may be downloaded from (the secret key goes nowhere else)."""
    for key in ("files_base", "base_url"):
        if isinstance(config.get(key), str) and config[key]:
            return config[key].rstrip("/")
    return FILES_BASE


def interval(period_start: datetime, period_end: datetime) -> tuple[int, int]:
    """The whole seconds of [period_start, period_end): the report's times are seconds."""
    return math.ceil(period_start.timestamp()), math.ceil(period_end.timestamp())


def filename(period_start: datetime, period_end: datetime) -> str:
    start, end = (moment.astimezone(UTC) for moment in (period_start, period_end))
    return f"stripe-balance-change-{start:%Y%m%dT%H%M%SZ}-{end:%Y%m%dT%H%M%SZ}.csv"


def fetch_statement(
    config: dict[str, Any], mode: str, period_start: datetime, period_end: datetime
) -> tuple[str, bytes]:
    """Stripe's itemized balance change report of [period_start, period_end), as CSV."""
    import stripe

    sdk = client(config, mode)
    start, end = interval(period_start, period_end)
    try:
        _available(sdk, end)
        parameters = {"interval_start": start, "interval_end": end, "columns": list(COLUMNS)}
        run = sdk.v1.reporting.report_runs.create(
            params={"report_type": REPORT_TYPE, "parameters": parameters}
        )
        run = _finished(sdk, run, config)
    except stripe.StripeError as exc:
        raise StatementFetchError(f"Stripe answered {type(exc).__name__}: {exc}"[:500]) from exc
    url = run.result.url if run.result is not None else None
    if not isinstance(url, str) or not url:
        raise StatementFetchError(f"report run {run.id} succeeded without a file url")
    return filename(period_start, period_end), download(config, mode, url)


def _available(sdk: Any, end: int) -> None:
    kind = sdk.v1.reporting.report_types.retrieve(REPORT_TYPE)
    if kind.data_available_end < end:
        ready = datetime.fromtimestamp(kind.data_available_end, UTC).isoformat()
        raise StatementFetchError(f"Stripe's balance data reaches only {ready} so far")


def _finished(sdk: Any, run: Any, config: dict[str, Any]) -> Any:
    """The run once it is no longer pending, within `report_wait` seconds."""
    poll = _seconds(config, "report_poll", 5.0)
    deadline = time.monotonic() + _seconds(config, "report_wait", 300.0)
    while run.status == "pending":
        if time.monotonic() + poll > deadline:
            raise StatementFetchError(f"report run {run.id} still pending; tried for too long")
        time.sleep(poll)
        run = sdk.v1.reporting.report_runs.retrieve(run.id)
    if run.status != "succeeded":
        raise StatementFetchError(f"report run {run.id} {run.status}: {run.error or ''}"[:500])
    return run


def download(config: dict[str, Any], mode: str, url: str) -> bytes:
    """The result file's content, fetched with the secret key from Stripe's files host only."""
    base = files_base(config)
    if not url.startswith(base + "/"):
        raise StatementFetchError(f"the report's file is not on {base}: not fetched")
    try:
        response = http_client().get(
            url,
            auth=(secret(config, "api_key", mode), ""),
            timeout=_timeout(config, "report_timeout", 120.0),
        )
    except httpx.HTTPError as exc:
        raise StatementFetchError(f"Stripe's files unreachable: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise StatementFetchError(f"Stripe's files answered {response.status_code}")
    return response.content
