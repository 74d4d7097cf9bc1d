"""A records provider searched by reference, the way many ticketing and CRM APIs are: every call
needs credentials, answers come in pages, and a busy provider says 429 with Retry-After.

    python -m devstack.providers.search.fake --port 0 --store S

Credentials: `Authorization: Bearer <token>`, `Authorization: Basic <user:password>` or
`X-Api-Key: <token>`, as set at start by SEARCH_FAKE_TOKEN, SEARCH_FAKE_USER and
SEARCH_FAKE_PASSWORD (defaults below). Anything else is 401.

    POST /records                      {"reference": "…", "state": "open"} → the record
    GET  /search?reference=R&paging=P&per_page=N[&cursor=C|&page=N]
    GET  /window?start=ISO&end=ISO&paging=P&per_page=N

Paging `P`: `next` (the body's `links.next` holds the next page's URL), `cursor` (the body's
`meta.next_cursor`, passed back as `cursor`) or `link` (an RFC 8288 `Link: <…>; rel="next"`
header). `POST /_sandbox/throttle {"requests": N, "retry_after": S}` makes the next N calls
answer 429 with `Retry-After: S`.
"""

from __future__ import annotations

import base64
import os
import threading
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from devstack.sandbox.faults import Faults
from devstack.sandbox.service import HttpError, Provider, Reply, Request, main, new_id

TOKEN = os.environ.get("SEARCH_FAKE_TOKEN", "search-token-0123456789")
USER = os.environ.get("SEARCH_FAKE_USER", "ledger")
PASSWORD = os.environ.get("SEARCH_FAKE_PASSWORD", "search-password-0123456789")
SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    reference TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


class SearchProvider(Provider):
    """A records provider with a search by reference, credentials, pages and rate limits."""

    name = "search"
    default_port = 0
    schema = SCHEMA

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._throttle = (0, 0)

    def handle(self, request: Request, faults: Faults) -> Reply:
        self._authorized(request)
        throttled = self._throttled()
        if throttled is not None:
            return throttled
        match request.method, request.path:
            case "POST", "/records":
                return self._create(request)
            case "GET", "/search":
                rows = self._rows("reference = ?", [request.query.get("reference", "")])
                return self._page(request, "/search", rows)
            case "GET", "/window":
                where = "created_at >= ? AND created_at < ?"
                rows = self._rows(where, [request.query.get("start"), request.query.get("end")])
                return self._page(request, "/window", rows)
        raise HttpError(404, "not_found", f"No such endpoint: {request.method} {request.path}.")

    def _authorized(self, request: Request) -> None:
        given = request.header("Authorization") or ""
        basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if given in (f"Bearer {TOKEN}", f"Basic {basic}") or request.header("X-Api-Key") == TOKEN:
            return
        raise HttpError(401, "unauthorized", "Missing or wrong credentials.")

    def _throttled(self) -> Reply | None:
        with self._lock:
            left, retry_after = self._throttle
            if left <= 0:
                return None
            self._throttle = (left - 1, retry_after)
        reply = HttpError(429, "rate_limited", "Too many requests.").reply()
        reply.headers["Retry-After"] = str(retry_after)
        return reply

    def _create(self, request: Request) -> Reply:
        body = request.json()
        reference, state = body.get("reference"), body.get("state", "open")
        if not isinstance(reference, str) or not reference or not isinstance(state, str):
            raise HttpError(400, "invalid_request", "`reference` and `state` must be strings.")
        record = {
            "id": new_id("rec"),
            "reference": reference,
            "state": state,
            "created_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        }
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO records (id, reference, state, created_at) VALUES (?, ?, ?, ?)",
                (record["id"], reference, state, record["created_at"]),
            )
        return Reply(201, record)

    def _rows(self, where: str, params: list[Any]) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute(
                f"SELECT id, reference, state, created_at FROM records WHERE {where} ORDER BY seq",
                params,
            ).fetchall()
        return [dict(row) for row in rows]

    def _page(self, request: Request, path: str, rows: list[dict[str, Any]]) -> Reply:
        """One page of `rows` in the paging style the request names."""
        paging = request.query.get("paging", "")
        per_page = int(request.query.get("per_page") or 100)
        start = int(request.query.get("cursor") or request.query.get("page") or 0)
        page, rest = rows[start : start + per_page], rows[start + per_page :]
        body: dict[str, Any] = {"data": page}
        headers: dict[str, str] = {}
        if rest and paging in ("next", "link"):
            query = {k: v for k, v in request.query.items() if k not in ("page", "cursor")}
            following = f"{path}?{urlencode({**query, 'page': start + per_page})}"
            if paging == "next":
                body["links"] = {"next": following}
            else:
                headers["Link"] = f'<{following}>; rel="next"'
        if paging == "cursor":
            body["meta"] = {"next_cursor": str(start + per_page) if rest else None}
        return Reply(200, body, headers=headers)

    def transactions(self) -> list[dict[str, Any]]:
        return self._rows("1 = 1", [])

    def reset(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM records")

    def inspect(self, request: Request) -> Reply | None:
        if (request.method, request.path) != ("POST", "/_sandbox/throttle"):
            return None
        body = request.json()
        with self._lock:
            self._throttle = (int(body.get("requests", 1)), int(body.get("retry_after", 1)))
        return Reply(200, {"throttled": self._throttle[0]})


if __name__ == "__main__":
    main(SearchProvider)
