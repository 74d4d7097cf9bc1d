"""Stripe's Reporting API, as a sandbox answers it: report runs and the files they produce.

`handle(provider, request)` answers, in Stripe's shapes (its OpenAPI fixtures for
`reporting.report_run`, `reporting.report_type` and `file`):

- `POST /v1/reporting/report_runs` (form-encoded: `report_type`, `parameters[interval_start]`,
  `parameters[interval_end]`, `parameters[columns][]`): a run, `pending`;
- `GET /v1/reporting/report_runs/{id}`: the run, `succeeded` once `REPORT_DELAY` has passed,
  with its `result` file (`purpose` finance_report_run, `type` csv, `url` on this server);
- `GET /v1/reporting/report_types/{id}`: the type, its data available up to the last second;
- `GET /v1/files/{id}` and `GET /v1/files/{id}/contents`: the file, and its CSV: the itemized
  balance change report (`balance_change_from_activity.itemized.3`) of the run's interval,
  with the run's columns (its default ones when it named none), metadata columns included.

It returns None for any other path, so that a provider's own router can try it first. Runs are
kept in the provider's store (table `report_runs`); what the report lists comes from the
provider: `provider.balance_activity(start, end)`, the `Movement`s (balance transactions)
created in [start, end) seconds, oldest first. `ReportingSandbox` is a provider with nothing
else, fed through `POST /_sandbox/movements`, for tests of the Reporting API alone:

    python -m devstack.sandbox.stripe_reporting --port 8105
"""

from __future__ import annotations

import csv
import io
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import parse_qsl

from devstack.sandbox.faults import Faults
from devstack.sandbox.service import HttpError, Provider, Reply, Request, main
from devstack.sandbox.store import Store

REPORT_TYPE = "balance_change_from_activity.itemized.3"
# How long a run stays pending (Stripe's take minutes; a test's patience is shorter).
REPORT_DELAY = 0.3
DEFAULT_COLUMNS = (
    "balance_transaction_id", "created_utc", "created", "available_on_utc", "available_on",
    "currency", "gross", "fee", "net", "reporting_category", "source_id", "description",
)  # fmt: skip
OPTIONAL_COLUMNS = ("charge_id", "payment_intent_id", "customer_facing_currency")
# Stripe's zero-decimal currencies: their amounts have no minor unit.
ZERO_DECIMAL = frozenset(
    ("bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv",
     "xaf", "xof", "xpf")
)  # fmt: skip
RUNS = """
CREATE TABLE IF NOT EXISTS report_runs (
    id TEXT PRIMARY KEY,
    file_id TEXT NOT NULL UNIQUE,
    report_type TEXT NOT NULL,
    interval_start INTEGER NOT NULL,
    interval_end INTEGER NOT NULL,
    columns TEXT NOT NULL,          -- JSON list
    created REAL NOT NULL,
    livemode INTEGER NOT NULL DEFAULT 0
);
"""


@dataclass(frozen=True)
class Movement:
    """One balance transaction, as the report lists it (amounts in minor units, signed)."""

    id: str
    created: int
    currency: str
    amount: int
    reporting_category: str
    source: str
    fee: int = 0
    payment_intent: str = ""
    charge: str = ""
    description: str = ""
    payment_metadata: dict[str, str] = field(default_factory=dict)
    refund_metadata: dict[str, str] = field(default_factory=dict)


class Activity(Protocol):
    store: Store

    def balance_activity(self, start: int, end: int) -> Iterable[Movement]: ...


def _invalid(message: str, param: str = "") -> HttpError:
    extra = {"param": param} if param else {}
    return HttpError(400, "invalid_request_error", message, **extra)


def _authorized(request: Request) -> None:
    """A secret key, as a bearer token (the SDK) or a basic-auth user (curl -u sk_…:)."""
    if not (request.header("Authorization") or "").strip():
        raise HttpError(401, "invalid_request_error", "You did not provide an API key.")


def handle(provider: Activity, request: Request) -> Reply | None:
    """The Reporting API's answer to `request`, or None when the path is not one of its."""
    parts = request.path.split("/")[1:]
    if parts[:2] not in (["v1", "reporting"], ["v1", "files"]):
        return None
    _authorized(request)
    _ensure_table(provider.store)
    match request.method, parts[1:]:
        case "POST", ["reporting", "report_runs"]:
            return Reply(200, _create(provider.store, request))
        case "GET", ["reporting", "report_runs", run_id]:
            return Reply(200, _public(_run(provider.store, "id", run_id), request))
        case "GET", ["reporting", "report_types", type_id]:
            return Reply(200, _report_type(type_id))
        case "GET", ["files", file_id]:
            return Reply(200, _file(_run(provider.store, "file_id", file_id), request))
        case "GET", ["files", file_id, "contents"]:
            run = _run(provider.store, "file_id", file_id)
            if not _ready(run):
                raise HttpError(404, "invalid_request_error", f"No such file: '{file_id}'")
            return Reply(200, raw=_csv(provider, run), content_type="text/csv")
    raise HttpError(404, "invalid_request_error", f"Unrecognized request URL ({request.path}).")


def _ensure_table(store: Store) -> None:
    with store.transaction() as db:
        db.execute(RUNS)


def _create(store: Store, request: Request) -> dict[str, Any]:
    form = parse_qsl(request.body.decode("utf-8", "replace"), keep_blank_values=True)
    values = dict(form)
    if values.get("report_type") != REPORT_TYPE:
        raise _invalid(f"This sandbox runs only {REPORT_TYPE}.", "report_type")
    try:
        start = int(values["parameters[interval_start]"])
        end = int(values["parameters[interval_end]"])
    except (KeyError, ValueError):
        raise _invalid(
            "interval_start and interval_end must be Unix times.", "parameters"
        ) from None
    if not start < end <= time.time() + 1:
        raise _invalid("interval_start must be before interval_end, both in the past.")
    columns = [v for k, v in form if k.startswith("parameters[columns]")] or list(DEFAULT_COLUMNS)
    for column in columns:
        if not _known(column):
            raise _invalid(f"Unknown column: {column}", "parameters[columns]")
    run_id, file_id = f"frr_{secrets.token_hex(12)}", f"file_{secrets.token_hex(12)}"
    with store.transaction() as db:
        db.execute(
            "INSERT INTO report_runs (id, file_id, report_type, interval_start, interval_end,"
            " columns, created) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run_id, file_id, REPORT_TYPE, start, end, json.dumps(columns), time.time()),
        )
    return _public(_run(store, "id", run_id), request)


def _known(column: str) -> bool:
    if column in DEFAULT_COLUMNS or column in OPTIONAL_COLUMNS:
        return True
    for prefix in ("payment_metadata[", "refund_metadata["):
        if column.startswith(prefix) and column.endswith("]") and len(column) > len(prefix) + 1:
            return True
    return False


def _run(store: Store, by: str, value: str) -> dict[str, Any]:
    with store.reading() as db:
        row = db.execute(f"SELECT * FROM report_runs WHERE {by} = ?", (value,)).fetchone()
    if row is None:
        kind = "reporting.report_run" if by == "id" else "file"
        raise HttpError(404, "invalid_request_error", f"No such {kind}: '{value}'")
    return dict(row)


def _ready(run: dict[str, Any]) -> bool:
    return time.time() >= run["created"] + REPORT_DELAY


def _base(request: Request) -> str:
    return f"http://{request.header('Host') or '127.0.0.1'}"


def _file(run: dict[str, Any], request: Request) -> dict[str, Any]:
    ready = run["created"] + REPORT_DELAY
    return {
        "id": run["file_id"],
        "object": "file",
        "created": int(ready),
        "expires_at": int(ready) + 365 * 86400,
        "filename": f"{run['file_id']}.csv",
        "links": {"object": "list", "data": [], "has_more": False, "url": "/v1/file_links"},
        "purpose": "finance_report_run",
        "size": 0,
        "title": f"{REPORT_TYPE} {run['interval_start']}-{run['interval_end']}",
        "type": "csv",
        "url": f"{_base(request)}/v1/files/{run['file_id']}/contents",
    }


def _public(run: dict[str, Any], request: Request) -> dict[str, Any]:
    ready = _ready(run)
    return {
        "id": run["id"],
        "object": "reporting.report_run",
        "created": int(run["created"]),
        "error": None,
        "livemode": bool(run["livemode"]),
        "parameters": {
            "interval_start": run["interval_start"],
            "interval_end": run["interval_end"],
            "columns": json.loads(run["columns"]),
        },
        "report_type": run["report_type"],
        "result": _file(run, request) if ready else None,
        "status": "succeeded" if ready else "pending",
        "succeeded_at": int(run["created"] + REPORT_DELAY) if ready else None,
    }


def _report_type(type_id: str) -> dict[str, Any]:
    if type_id != REPORT_TYPE:
        raise HttpError(404, "invalid_request_error", f"No such report type: '{type_id}'")
    now = int(time.time())
    return {
        "id": REPORT_TYPE,
        "object": "reporting.report_type",
        "data_available_start": 0,
        "data_available_end": now,
        "default_columns": list(DEFAULT_COLUMNS),
        "livemode": False,
        "name": "Itemized balance change from activity",
        "updated": now,
        "version": 3,
    }


def major(minor: int, currency: str) -> str:
    """An amount in major units as Stripe's reports write it ("-12.50", "1000")."""
    if currency.lower() in ZERO_DECIMAL:
        return str(minor)
    sign = "-" if minor < 0 else ""
    whole, cents = divmod(abs(minor), 100)
    return f"{sign}{whole}.{cents:02d}"


def _stamp(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def line(movement: Movement, columns: list[str]) -> list[str]:
    """One report line: the movement's values for `columns`."""
    at = _stamp(movement.created)
    values = {
        "balance_transaction_id": movement.id,
        "created_utc": at,
        "created": at,
        "available_on_utc": at,
        "available_on": at,
        "currency": movement.currency.lower(),
        "gross": major(movement.amount, movement.currency),
        "fee": major(movement.fee, movement.currency),
        "net": major(movement.amount - movement.fee, movement.currency),
        "reporting_category": movement.reporting_category,
        "source_id": movement.source,
        "description": movement.description,
        "charge_id": movement.charge,
        "payment_intent_id": movement.payment_intent,
        "customer_facing_currency": movement.currency.lower(),
    }
    out = []
    for column in columns:
        if column.startswith("payment_metadata["):
            out.append(movement.payment_metadata.get(column[17:-1], ""))
        elif column.startswith("refund_metadata["):
            out.append(movement.refund_metadata.get(column[16:-1], ""))
        else:
            out.append(values[column])
    return out


def _csv(provider: Activity, run: dict[str, Any]) -> bytes:
    columns = json.loads(run["columns"])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for movement in provider.balance_activity(run["interval_start"], run["interval_end"]):
        writer.writerow(line(movement, columns))
    return out.getvalue().encode()


MOVEMENTS = """
CREATE TABLE IF NOT EXISTS movements (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    created INTEGER NOT NULL,
    body TEXT NOT NULL            -- the Movement, as JSON
);
CREATE INDEX IF NOT EXISTS movements_created ON movements (created);
"""


class ReportingSandbox(Provider):
    """A sandbox of Stripe's Reporting API alone, its balance transactions posted to it."""

    name = "stripe_reporting"
    default_port = 8105
    schema = MOVEMENTS + RUNS

    def handle(self, request: Request, faults: Faults) -> Reply:
        reply = handle(self, request)
        if reply is None:
            raise HttpError(404, "invalid_request_error", f"Unrecognized URL ({request.path}).")
        return reply

    def balance_activity(self, start: int, end: int) -> Iterable[Movement]:
        with self.store.reading() as db:
            rows = db.execute(
                "SELECT body FROM movements WHERE created >= ? AND created < ? ORDER BY seq",
                (start, end),
            ).fetchall()
        return [Movement(**json.loads(row["body"])) for row in rows]

    def transactions(self) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute("SELECT body FROM movements ORDER BY seq").fetchall()
        return [json.loads(row["body"]) for row in rows]

    def inspect(self, request: Request) -> Reply | None:
        if (request.method, request.path) != ("POST", "/_sandbox/movements"):
            return None
        try:
            body = json.loads(request.body)
            movements = [Movement(**item) for item in body["data"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise _invalid(f"movements: {exc}") from None
        with self.store.transaction() as db:
            db.executemany(
                "INSERT INTO movements (created, body) VALUES (?, ?)",
                [(m.created, json.dumps(asdict(m))) for m in movements],
            )
        return Reply(200, {"added": len(movements)})

    def reset(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM movements")
            db.execute("DELETE FROM report_runs")


if __name__ == "__main__":
    main(ReportingSandbox)
