"""Baseline for `bench/lifecycle.py`: the ledger's two lifecycle calls without the framework.

A bare WSGI app (no Django, no django-ninja, no pydantic) on psycopg 3 with one connection per
thread. It runs, against the same migrated tables, the statements the ledger runs for
`POST /api/v1/effects` (intent + claim) and `POST /api/v1/effects/{id}/outcome`, grouped into
the same transactions and in the same order, one round trip each:

intent + claim: API-key lookup, tool lookup, BEGIN, effect-key lookup, run `seq` upsert, effect
insert, intent event, dependency check (`FOR SHARE`), conditional claim update, transition
event, COMMIT, upstreams read for the response;

outcome: API-key lookup, effect select, tool lookup, BEGIN, conditional fenced update,
transition event, COMMIT, upstreams read for the response.

What it leaves out is exactly what the comparison is about: request validation, redaction,
exact-decimal JSON, the ORM, middleware, and the statements Django adds by itself (the
per-request `SELECT 1` health check, SAVEPOINT/RELEASE for nested atomic blocks). It talks to
PostgreSQL the way Django does (client-side parameter binding, no prepared statements), so the
database does the same work for both.

`BareLedger` is used directly (no HTTP) by the raw-psycopg baseline as well.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
Reply = tuple[int, dict[str, Any]]

_SECRET = os.environ.get("SECRET_KEY", "bench-baseline").encode()
_OUTCOME_PATH = re.compile(r"^/api/v1/effects/([0-9a-fA-F-]{36})/outcome$")
_REASONS = {
    200: "200 OK",
    201: "201 Created",
    401: "401 Unauthorized",
    404: "404 Not Found",
    409: "409 Conflict",
    500: "500 Internal Server Error",
}

SQL_AGENT = (
    "SELECT k.digest, a.id, a.name FROM ledger_apikey k JOIN ledger_agent a ON a.id = k.agent_id"
    " WHERE k.prefix = %s AND k.revoked_at IS NULL AND a.is_active LIMIT 1"
)
SQL_TOOL = "SELECT * FROM ledger_tool WHERE name = %s LIMIT 1"
SQL_EFFECT_BY_KEY = "SELECT * FROM ledger_effect WHERE agent_id = %s AND effect_key = %s LIMIT 1"
SQL_EFFECT_BY_ID = "SELECT * FROM ledger_effect WHERE id = %s AND agent_id = %s LIMIT 1"
SQL_NEXT_SEQ = (
    "INSERT INTO ledger_run (agent_id, run_id, last_seq, created_at) VALUES (%s, %s, 1, now())"
    " ON CONFLICT (agent_id, run_id) DO UPDATE SET last_seq = ledger_run.last_seq + 1"
    " RETURNING last_seq"
)
INSERT_EFFECT_COLUMNS = (
    "id, agent_id, effect_key, run_id, step_id, seq, kind, tool, target, request, request_hash,"
    " idempotency_key, status, attempt, max_attempts, lease_owner, provider_ref, outcome_digest,"
    " outcome_token, parent_id, provenance, version, created_at, updated_at"
)
INSERT_EFFECT_VALUES = (
    "%s, %s, %s, %s, %s, %s, 'action', %s, %s, %s, %s, %s, 'planned', 0, %s, '', '', '', '',"
    " NULL, %s, 1, now(), now()"
)
# Zero values, by type, for NOT NULL columns without a database default that the ledger's
# INSERT sets from a Django `default=` (a column added later): the baseline keeps up.
_ZERO_BY_TYPE = {
    "integer": "0",
    "bigint": "0",
    "smallint": "0",
    "numeric": "0",
    "boolean": "false",
    "character varying": "''",
    "text": "''",
    "jsonb": "'{}'::jsonb",
    "json": "'{}'::json",
    "timestamp with time zone": "now()",
    "interval": "'0'::interval",
}
SQL_REQUIRED_COLUMNS = (
    "SELECT column_name, data_type FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name = 'ledger_effect'"
    " AND is_nullable = 'NO' AND column_default IS NULL AND is_identity = 'NO'"
)
SQL_INSERT_EVENT = (
    "INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status, reason,"
    " data, digest, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now()) RETURNING id"
)
SQL_BLOCKED_BY = (
    "SELECT u.id, u.status, EXISTS (SELECT 1 FROM ledger_effect c WHERE c.parent_id = u.id"
    " AND c.kind = 'compensation'"
    " AND c.status IN ('planned', 'dispatching', 'awaiting_confirmation', 'unknown'))"
    " FROM ledger_effectdependency d JOIN ledger_effect u ON u.id = d.upstream_id"
    " WHERE d.downstream_id = %s ORDER BY u.id FOR SHARE OF u"
)
SQL_CLAIM = (
    "UPDATE ledger_effect SET status = 'dispatching', version = version + 1, updated_at = now(),"
    " attempt = attempt + 1, lease_owner = %s, lease_token = %s, claim_id = %s,"
    " lease_seconds = %s, lease_expires_at = now() + make_interval(secs => %s)"
    " WHERE id = %s AND status = 'planned' AND version = %s AND attempt < max_attempts"
    " RETURNING *"
)
SQL_OUTCOME = (
    "UPDATE ledger_effect SET status = %s, version = version + 1, updated_at = now(),"
    " outcome_digest = %s, outcome_token = %s, provider_ref = %s, response = %s,"
    " lease_token = NULL, claim_id = NULL, lease_expires_at = NULL, lease_seconds = NULL,"
    " resolved_at = now(), next_check_at = NULL"
    " WHERE id = %s AND status = 'dispatching' AND version = %s"
    " AND lease_token = %s AND lease_expires_at > now() RETURNING *"
)
SQL_UPSTREAMS = (
    "SELECT d.downstream_id, u.id, u.status FROM ledger_effectdependency d"
    " JOIN ledger_effect u ON u.id = d.upstream_id WHERE d.downstream_id = ANY(%s) ORDER BY d.id"
)

# Outcome statuses this baseline handles (the lifecycle reports `confirmed`).
_RESOLVING = {"confirmed", "failed"}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _mac(purpose: str, message: str) -> str:
    return hmac.new(_SECRET, f"{purpose}\x00{message}".encode(), hashlib.sha256).hexdigest()


def _error(status: int, code: str, detail: str) -> Reply:
    return status, {"error": code, "detail": detail}


class BareLedger:
    """The ledger's lifecycle statements on one psycopg connection (one per thread)."""

    insert_effect_sql: str | None = None  # built once per process, from the live schema

    def __init__(self, url: str) -> None:
        # As Django talks to PostgreSQL: autocommit (single statements commit on their own,
        # `conn.transaction()` sends BEGIN … COMMIT around the grouped ones) and client-side
        # parameter binding, so no prepared statements (Django's default; psycopg's own default
        # would prepare repeated statements and make the database's share of the work smaller).
        self.conn = psycopg.connect(
            url, autocommit=True, row_factory=dict_row, cursor_factory=psycopg.ClientCursor
        )
        if BareLedger.insert_effect_sql is None:
            BareLedger.insert_effect_sql = self._insert_effect_sql()

    def _insert_effect_sql(self) -> str:
        named = {c.strip() for c in INSERT_EFFECT_COLUMNS.split(",")}
        extra = [
            (row["column_name"], _ZERO_BY_TYPE[row["data_type"]])
            for row in self.conn.execute(SQL_REQUIRED_COLUMNS).fetchall()
            if row["column_name"] not in named and row["data_type"] in _ZERO_BY_TYPE
        ]
        columns = INSERT_EFFECT_COLUMNS + "".join(f", {name}" for name, _ in extra)
        values = INSERT_EFFECT_VALUES + "".join(f", {zero}" for _, zero in extra)
        return (
            f"INSERT INTO ledger_effect ({columns}) VALUES ({values})"
            " ON CONFLICT (agent_id, effect_key) DO NOTHING RETURNING *"
        )

    def close(self) -> None:
        self.conn.close()

    def _agent(self, authorization: str) -> dict[str, Any] | None:
        key = authorization.removeprefix("Bearer ").strip()
        if not key.startswith("elk_") or len(key) > 200:
            return None
        # elk_<mode>_<12-hex prefix>_<secret>, or elk_<prefix>_<secret> for keys from before modes.
        parts = key.split("_")
        prefix = parts[2] if parts[1] in ("test", "live") else parts[1]
        row = self.conn.execute(SQL_AGENT, [prefix]).fetchone()
        digest = hashlib.sha256(key.encode()).hexdigest()
        if row is None or not hmac.compare_digest(row["digest"], digest):
            return None
        return row

    def _event(
        self,
        effect_id: Any,
        kind: str,
        actor: str,
        from_status: str,
        to_status: str,
        reason: str,
        data: dict[str, Any],
    ) -> None:
        digest = hashlib.sha256(_canonical(data).encode()).hexdigest()
        self.conn.execute(
            SQL_INSERT_EVENT,
            [effect_id, kind, actor, from_status, to_status, reason, Jsonb(data), digest],
        )

    def _show(self, effect: dict[str, Any], agent_name: str, *, claimer: bool) -> dict[str, Any]:
        rows = self.conn.execute(SQL_UPSTREAMS, [[effect["id"]]]).fetchall()
        shown = {k: v for k, v in effect.items() if k not in _HIDDEN}
        shown["agent"] = agent_name
        shown["depends_on"] = [str(r["id"]) for r in rows]
        shown["blocked_by"] = [
            {"id": str(r["id"]), "status": r["status"]} for r in rows if r["status"] != "confirmed"
        ]
        if not claimer:
            shown.pop("lease_token", None)
        return shown

    def post_effect(self, authorization: str, body: bytes) -> Reply:
        """Intent + claim in one transaction (`POST /api/v1/effects` with `claim: true`)."""
        agent = self._agent(authorization)
        if agent is None:
            return _error(401, "unauthorized", "A valid agent key is required.")
        data = json.loads(body)
        actor = f"agent:{agent['name']}"
        tool = self.conn.execute(SQL_TOOL, [data["tool"]]).fetchone()
        max_attempts = tool["max_attempts"] if tool else 3
        effect_key = data.get("effect_key") or f"{data['run_id']}:{data['step_id']}"
        hashed = {"tool": data["tool"], "target": data["target"], "request": data["request"]}
        request_hash = "v1:" + _mac("request", _canonical(hashed))
        idempotency_key = "el_" + _mac("idempotency", f"{agent['id']}\x00{effect_key}")[:32]
        created = False
        with self.conn.transaction():
            effect = self.conn.execute(SQL_EFFECT_BY_KEY, [agent["id"], effect_key]).fetchone()
            if effect is None:
                seq = self.conn.execute(SQL_NEXT_SEQ, [agent["id"], data["run_id"]]).fetchone()
                assert BareLedger.insert_effect_sql is not None
                effect = self.conn.execute(
                    BareLedger.insert_effect_sql,
                    [
                        uuid.uuid4(),
                        agent["id"],
                        effect_key,
                        data["run_id"],
                        data["step_id"],
                        seq["last_seq"],
                        data["tool"],
                        data["target"],
                        Jsonb(data["request"]),
                        request_hash,
                        idempotency_key,
                        max_attempts,
                        Jsonb(data.get("provenance") or {}),
                    ],
                ).fetchone()
                assert effect is not None, "concurrent intent under the same key"
                created = True
                self._event(
                    effect["id"],
                    "intent",
                    actor,
                    "",
                    "planned",
                    "intent",
                    {"request_hash": request_hash, "depends_on": []},
                )
            if data.get("claim") and effect["status"] == "planned":
                waiting = self.conn.execute(SQL_BLOCKED_BY, [effect["id"]]).fetchall()
                if any(r["status"] != "confirmed" for r in waiting):
                    return _error(409, "blocked", "Upstream effects are not confirmed yet.")
                owner, claim_id = data.get("owner", ""), data.get("claim_id")
                lease = int(data.get("lease_seconds") or 60)
                effect = self.conn.execute(
                    SQL_CLAIM,
                    [
                        owner,
                        secrets.token_urlsafe(24),
                        claim_id,
                        lease,
                        lease,
                        effect["id"],
                        effect["version"],
                    ],
                ).fetchone()
                if effect is None:
                    return _error(409, "invalid_transition", "Claimed by someone else first.")
                self._event(
                    effect["id"],
                    "transition",
                    actor,
                    "planned",
                    "dispatching",
                    "claimed",
                    {"owner": owner, "claim_id": claim_id, "lease_seconds": lease},
                )
        return (201 if created else 200), self._show(effect, agent["name"], claimer=True)

    def post_outcome(self, authorization: str, effect_id: str, body: bytes) -> Reply:
        """The lease holder's report (`POST /api/v1/effects/{id}/outcome`)."""
        agent = self._agent(authorization)
        if agent is None:
            return _error(401, "unauthorized", "A valid agent key is required.")
        data = json.loads(body)
        effect = self.conn.execute(SQL_EFFECT_BY_ID, [effect_id, agent["id"]]).fetchone()
        if effect is None:
            return _error(404, "not_found", "No such effect.")
        self.conn.execute(SQL_TOOL, [effect["tool"]]).fetchone()
        status, token = data["status"], data["lease_token"]
        if status not in _RESOLVING:
            return _error(409, "invalid_transition", "This baseline reports final outcomes only.")
        provider_ref, response = data.get("provider_ref", ""), data.get("response")
        digest = _mac(
            "value",
            _canonical(
                {
                    "token": token,
                    "status": status,
                    "provider_ref": provider_ref,
                    "response": response,
                }
            ),
        )
        with self.conn.transaction():
            moved = self.conn.execute(
                SQL_OUTCOME,
                [
                    status,
                    digest,
                    token,
                    provider_ref,
                    Jsonb(response),
                    effect["id"],
                    effect["version"],
                    token,
                ],
            ).fetchone()
            if moved is None:
                return _error(409, "stale_lease", "This lease token no longer holds the effect.")
            self._event(
                moved["id"],
                "transition",
                f"agent:{agent['name']}",
                "dispatching",
                status,
                status,
                {"outcome": status, "provider_ref": provider_ref, "response": response},
            )
        return 200, self._show(moved, agent["name"], claimer=False)

    def health(self) -> Reply:
        self.conn.execute("SELECT 1").fetchone()
        return 200, {"status": "ok", "database": "ok"}


# Columns the API does not show.
_HIDDEN = frozenset(
    {
        "request_hash",
        "outcome_digest",
        "outcome_token",
        "claim_id",
        "next_check_at",
        "version",
        "agent_id",
    }
)

_local = threading.local()


def _ledger() -> BareLedger:
    ledger: BareLedger | None = getattr(_local, "ledger", None)
    if ledger is None or ledger.conn.closed:
        ledger = _local.ledger = BareLedger(os.environ["DATABASE_URL"])
    return ledger


def _read_body(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return environ["wsgi.input"].read(length) if length else b""


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    ledger = _ledger()
    try:
        if method == "POST" and path == "/api/v1/effects":
            status, payload = ledger.post_effect(authorization, _read_body(environ))
        elif method == "POST" and (match := _OUTCOME_PATH.match(path)):
            status, payload = ledger.post_outcome(authorization, match[1], _read_body(environ))
        elif method == "GET" and path == "/api/v1/health":
            status, payload = ledger.health()
        else:
            status, payload = _error(404, "not_found", "No such resource.")
    except psycopg.Error as exc:
        status, payload = _error(500, "database_error", str(exc))
    out = json.dumps(payload, default=str).encode()
    start_response(
        _REASONS.get(status, f"{status} Status"),
        [("Content-Type", "application/json"), ("Content-Length", str(len(out)))],
    )
    return [out]
