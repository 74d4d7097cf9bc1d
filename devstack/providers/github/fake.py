"""A fake GitHub that answers the issues endpoints as GitHub's REST API documents them.

    python -m devstack.providers.github.fake --port 8105

- `POST /repos/{owner}/{repo}/issues` opens an issue (201, the issue object; 422 "Validation
  Failed" without a title or with a body over 65,536 characters). GitHub keeps no idempotency
  key: every POST opens another issue.
- `GET /repos/{owner}/{repo}/issues` lists issues and pull requests: `state` (open, closed,
  all), `sort` (created, updated), `direction`, `since` (by *updated* time), `per_page` (at
  most 100) and `page`, with the `Link` header's next, last, first and prev.
- `GET` / `PATCH /repos/{owner}/{repo}/issues/{number}`: one issue; an edit of its title,
  body or state (as a person would make in the web page).
- `/api/v3` before any path is accepted too (GitHub Enterprise Server's API root).
- A token is required: `Authorization: token …` or `Bearer …` with the token of
  $FAKE_GITHUB_TOKEN (default `ghp_fake0123456789`); 401 "Bad credentials" otherwise.

Errors have GitHub's shape. Besides the sandbox's faults (`X-Sandbox-Fault`), the test
endpoints arm GitHub's own refusals for the next requests: `POST /_sandbox/rate-limit`
(`{"count", "kind": "secondary"|"primary", "status": 403|429, "retry_after", "methods"}`)
and `POST /_sandbox/truncate` (`{"count", "skip"}`: list answers cut in half, after `skip`
whole ones). `POST
/_sandbox/seed` writes issues or pull requests at a given time, `POST /_sandbox/webhook`
(`{"url", "secret"}`) makes every opened issue a signed `issues` delivery
(`devstack.providers.github.hooks`), and `GET /_sandbox/deliveries` shows them.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import threading
import time
from typing import Any
from urllib.parse import urlencode

from devstack.providers.github import shapes
from devstack.providers.github.hooks import Hooks
from devstack.providers.github.shapes import GitHubError
from devstack.sandbox.faults import Faults
from devstack.sandbox.service import Provider, Reply, Request, main

SCHEMA = """
CREATE TABLE IF NOT EXISTS repos (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    full_name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS issues (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    repo TEXT NOT NULL,
    repo_id INTEGER NOT NULL,
    number INTEGER NOT NULL,
    node_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    body TEXT,
    state TEXT NOT NULL DEFAULT 'open',
    labels TEXT NOT NULL DEFAULT '[]',
    author TEXT NOT NULL,
    is_pull INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    closed REAL,
    UNIQUE (repo_id, number)
);
"""
TOKEN = os.environ.get("FAKE_GITHUB_TOKEN") or "ghp_fake0123456789"
AUTHOR = "effect-ledger-bot"
MAX_BODY = 65_536
_PATH = re.compile(
    r"(?:/api/v3)?/repos/(?P<owner>[A-Za-z0-9-]{1,39})/(?P<repo>[A-Za-z0-9._-]{1,100})"
    r"/issues(?:/(?P<number>\d{1,9}))?"
)


class FakeGitHub(Provider):
    """A fake GitHub: a repository's issues, its pages, its refusals and its webhooks."""

    name = "github"
    default_port = 8105
    schema = SCHEMA

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.hooks = Hooks()
        self._armed_lock = threading.Lock()
        self._limit: dict[str, Any] = {}
        self._truncate = 0
        self._truncate_skip = 0

    def handle(self, request: Request, faults: Faults) -> Reply:
        route = _PATH.fullmatch(request.path)
        if route is None:
            raise GitHubError(404, "Not Found")
        self._authenticate(request)
        self._rate_limited(request.method)
        owner, repo, number = route["owner"], route["repo"], route["number"]
        match request.method, number:
            case "POST", None:
                return self.open_issue(request, f"{owner}/{repo}")
            case "GET", None:
                return self.list_issues(request, f"{owner}/{repo}")
            case "GET", _:
                return Reply(200, self._shaped(request, self._one(f"{owner}/{repo}", int(number))))
            case "PATCH", _:
                return self.edit_issue(request, f"{owner}/{repo}", int(number))
        raise GitHubError(404, "Not Found")

    def _authenticate(self, request: Request) -> None:
        scheme, _, token = (request.header("Authorization") or "").partition(" ")
        if scheme.lower() not in ("token", "bearer") or token.strip() != TOKEN:
            raise GitHubError(401, "Bad credentials")

    def _rate_limited(self, method: str) -> None:
        with self._armed_lock:
            limit = self._limit
            if not limit.get("count") or method not in limit["methods"]:
                return
            limit["count"] -= 1
        if limit["kind"] == "primary":
            raise shapes.primary_limit(limit["retry_after"])
        raise shapes.secondary_limit(limit["status"], limit["retry_after"])

    def _api(self, request: Request) -> str:
        """The API root the client called, for the URLs inside answers and the Link header."""
        prefix = "/api/v3" if request.path.startswith("/api/v3/") else ""
        return f"http://{request.header('Host') or '127.0.0.1'}{prefix}"

    def _shaped(self, request: Request, row: dict[str, Any]) -> dict[str, Any]:
        return shapes.issue(row, self._api(request))

    # --- The API -----------------------------------------------------------------------------

    def open_issue(self, request: Request, full_name: str) -> Reply:
        fields = _json_object(request.body)
        title, body = fields.get("title"), fields.get("body")
        labels = fields.get("labels") or []
        if isinstance(title, int) and not isinstance(title, bool):
            title = str(title)
        if not isinstance(title, str) or not title.strip():
            raise _invalid("title", "missing_field")
        if body is not None and not isinstance(body, str):
            raise _invalid("body", "invalid")
        if body is not None and len(body) > MAX_BODY:
            raise GitHubError(422, f"Validation Failed: body is too long (maximum is {MAX_BODY})")
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise _invalid("labels", "invalid")
        row = self._insert(full_name, title, body, labels, pull=False, at=time.time())
        shaped = self._shaped(request, row)
        self.hooks.opened(shaped, shapes.repository(self._repo(full_name), self._api(request)))
        return Reply(201, shaped, headers={"Location": shaped["url"]})

    def list_issues(self, request: Request, full_name: str) -> Reply:
        query = request.query
        state = query.get("state", "open")
        sort = query.get("sort", "created")
        direction = query.get("direction", "desc")
        if state not in ("open", "closed", "all") or sort not in ("created", "updated"):
            raise _invalid("state" if state not in ("open", "closed", "all") else "sort", "invalid")
        if direction not in ("asc", "desc"):
            raise _invalid("direction", "invalid")
        per_page, page = _bounded(query.get("per_page"), 30, 100), _bounded(query.get("page"), 1)
        since = _since(query.get("since"))
        column = "created" if sort == "created" else "updated"
        order = "DESC" if direction == "desc" else "ASC"
        with self.store.reading() as db:
            rows = db.execute(
                f"SELECT * FROM issues WHERE repo = ? COLLATE NOCASE AND updated >= ?"
                f" AND (? = 'all' OR state = ?) ORDER BY {column} {order}, number {order}",
                (full_name, since, state, state),
            ).fetchall()
        chunk = rows[(page - 1) * per_page : page * per_page]
        reply = Reply(200, [self._shaped(request, dict(r)) for r in chunk])
        last = max(1, -(-len(rows) // per_page))
        link = _links(f"{self._api(request)}/repos/{full_name}/issues", query, page, last)
        if link:
            reply.headers["Link"] = link
        return self._maybe_truncated(reply)

    def edit_issue(self, request: Request, full_name: str, number: int) -> Reply:
        fields = _json_object(request.body)
        row = self._one(full_name, number)
        for name in ("title", "body"):
            if name in fields and fields[name] is not None and not isinstance(fields[name], str):
                raise _invalid(name, "invalid")
        state = fields.get("state", row["state"])
        if state not in ("open", "closed"):
            raise _invalid("state", "invalid")
        now = time.time()
        with self.store.transaction() as db:
            db.execute(
                "UPDATE issues SET title = ?, body = ?, state = ?, updated = ?, closed = ?"
                " WHERE id = ?",
                (
                    fields.get("title") or row["title"],
                    fields["body"] if "body" in fields else row["body"],
                    state,
                    now,
                    now if state == "closed" else None,
                    row["id"],
                ),
            )
        return Reply(200, self._shaped(request, self._one(full_name, number)))

    # --- The store ---------------------------------------------------------------------------

    def _repo(self, full_name: str) -> dict[str, Any]:
        with self.store.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO repos (full_name, created) VALUES (?, ?)",
                (full_name, time.time()),
            )
            return dict(
                db.execute("SELECT * FROM repos WHERE full_name = ?", (full_name,)).fetchone()
            )

    def _insert(
        self,
        full_name: str,
        title: str,
        body: str | None,
        labels: list[str],
        *,
        pull: bool,
        at: float,
        copies: int = 1,
    ) -> dict[str, Any]:
        """Open `copies` issues alike in one transaction; the last one's row."""
        repo = self._repo(full_name)
        prefix = "PR_kwDO" if pull else "I_kwDO"
        with self.store.transaction() as db:
            first = db.execute(
                "SELECT COALESCE(MAX(number), 0) + 1 FROM issues WHERE repo_id = ?", (repo["id"],)
            ).fetchone()[0]
            numbers = range(first, first + copies)
            db.executemany(
                "INSERT INTO issues (repo, repo_id, number, node_id, title, body, labels, author,"
                " is_pull, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        repo["full_name"],
                        repo["id"],
                        number,
                        shapes.node_id(prefix, repo["id"], number),
                        title,
                        body,
                        json.dumps(labels),
                        AUTHOR,
                        int(pull),
                        at,
                        at,
                    )
                    for number in numbers
                ],
            )
            row = db.execute(
                "SELECT * FROM issues WHERE repo_id = ? AND number = ?", (repo["id"], numbers[-1])
            ).fetchone()
        return dict(row)

    def _one(self, full_name: str, number: int) -> dict[str, Any]:
        with self.store.reading() as db:
            row = db.execute(
                "SELECT * FROM issues WHERE repo = ? COLLATE NOCASE AND number = ?",
                (full_name, number),
            ).fetchone()
        if row is None:
            raise GitHubError(404, "Not Found")
        return dict(row)

    def _maybe_truncated(self, reply: Reply) -> Reply:
        with self._armed_lock:
            if not self._truncate:
                return reply
            if self._truncate_skip:
                self._truncate_skip -= 1
                return reply
            self._truncate -= 1
        text = json.dumps(reply.payload).encode()
        return Reply(200, raw=text[: max(1, len(text) // 2)], headers=reply.headers)

    # --- Test endpoints ----------------------------------------------------------------------

    def transactions(self) -> list[dict[str, Any]]:
        with self.store.reading() as db:
            rows = db.execute("SELECT * FROM issues ORDER BY id").fetchall()
        return [{**shapes.issue(dict(r), "http://fake"), "repo": r["repo"]} for r in rows]

    def reset(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM issues")
        with self._armed_lock:
            self._limit, self._truncate = {}, 0
        self.hooks.configure(None, None)

    def inspect(self, request: Request) -> Reply | None:
        match request.method, request.path:
            case "POST", "/_sandbox/rate-limit":
                return self._arm_limit(_json_object(request.body))
            case "POST", "/_sandbox/truncate":
                fields = _json_object(request.body)
                with self._armed_lock:
                    self._truncate = _bounded(fields.get("count"), 1)
                    self._truncate_skip = (
                        _bounded(fields.get("skip"), 0) if fields.get("skip") else 0
                    )
                return Reply(200, {"truncate": self._truncate, "skip": self._truncate_skip})
            case "POST", "/_sandbox/seed":
                return self._seed(_json_object(request.body))
            case "POST", "/_sandbox/webhook":
                fields = _json_object(request.body)
                self.hooks.configure(fields.get("url"), fields.get("secret"))
                return Reply(200, {"url": fields.get("url")})
            case "GET", "/_sandbox/deliveries":
                return Reply(200, {"object": "list", "data": self.hooks.deliveries()})
        return None

    def _arm_limit(self, fields: dict[str, Any]) -> Reply:
        kind = fields.get("kind", "secondary")
        status = fields.get("status", 403)
        methods = fields.get("methods", ["GET", "POST"])
        if kind not in ("secondary", "primary") or status not in (403, 429):
            raise GitHubError(400, "kind must be secondary or primary, status 403 or 429")
        if not isinstance(methods, list) or not set(methods) <= {"GET", "POST", "PATCH"}:
            raise GitHubError(400, "methods must be a list of GET, POST, PATCH")
        limit = {
            "count": _bounded(fields.get("count"), 1),
            "kind": kind,
            "status": status,
            "retry_after": _bounded(fields.get("retry_after"), 60),
            "methods": methods,
        }
        with self._armed_lock:
            self._limit = limit
        return Reply(200, limit)

    def _seed(self, fields: dict[str, Any]) -> Reply:
        """An issue (or pull request; `copies` of them) as if opened at `created` (Unix
        seconds): what happened before the test, or a pull request, which this API cannot
        open."""
        full_name, title = fields.get("repo"), fields.get("title")
        created, body = fields.get("created", time.time()), fields.get("body")
        if not isinstance(full_name, str) or "/" not in full_name or not isinstance(title, str):
            raise GitHubError(400, "repo (owner/name) and title are required")
        if not isinstance(created, int | float) or isinstance(created, bool):
            raise GitHubError(400, "created must be Unix seconds")
        if body is not None and not isinstance(body, str):
            raise GitHubError(400, "body must be a string")
        row = self._insert(
            full_name,
            title,
            body,
            [],
            pull=bool(fields.get("pull_request")),
            at=float(created),
            copies=_bounded(fields.get("copies"), 1, 1000),
        )
        return Reply(201, shapes.issue(row, "http://fake"))


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        raise GitHubError(400, "Problems parsing JSON") from None
    if not isinstance(data, dict):
        raise GitHubError(400, "Problems parsing JSON")
    return data


def _invalid(field: str, code: str) -> GitHubError:
    return GitHubError(
        422, "Validation Failed", [{"resource": "Issue", "code": code, "field": field}]
    )


def _bounded(raw: Any, default: int, most: int = 10_000) -> int:
    try:
        value = int(raw) if raw not in (None, "") else default
    except (TypeError, ValueError):
        return default
    return min(max(value, 1), most)


def _since(raw: str | None) -> float:
    if not raw:
        return 0.0
    try:
        moment = time.strptime(raw.replace("+00:00", "Z"), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise _invalid("since", "invalid") from None
    return float(calendar.timegm(moment))


def _links(base: str, query: dict[str, str], page: int, last: int) -> str:
    """RFC 8288 links to the other pages, as GitHub sends them (none for a single page)."""
    if last <= 1:
        return ""
    others = {name: value for name, value in query.items() if name != "page"}
    targets = []
    if page < last:
        targets += [("next", page + 1), ("last", last)]
    if page > 1:
        targets += [("first", 1), ("prev", page - 1)]
    return ", ".join(
        f'<{base}?{urlencode({**others, "page": number})}>; rel="{rel}"' for rel, number in targets
    )


if __name__ == "__main__":
    main(FakeGitHub)
