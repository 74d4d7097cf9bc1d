"""Baseline for `bench/lifecycle.py`: the ledger's two lifecycle calls without the framework.

A bare WSGI app (no Django, no django-ninja, no pydantic) on psycopg 3 with one connection per
thread. It runs, against the same migrated tables, the statements the ledger's success path
runs (`ledger.effects.hotpath`), one round trip each, in autocommit:

intent + claim: one statement (run `seq` upsert, effect inserted `dispatching` with its lease,
its `intent` and `claimed` events), under the same triggers (halts, limits, notifications);

outcome: the effect's read (with whether it has upstream effects), then one statement (the
fenced update and its event).

Both look the API key up at most every 0.2 s per thread, as the ledger's processes do
(`agentkeys.RECHECK_SECONDS`), and both use prepared statements (server-side binding, psycopg's
`prepare_threshold`), so the database does the same work for both. What it leaves out is exactly
what the comparison is about: request validation, redaction, exact-decimal JSON, Django,
django-ninja and middleware.

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
import time
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
INSERT_EFFECT_COLUMNS = (
    "id, agent_id, effect_key, run_id, step_id, seq, kind, tool, target, request, request_hash,"
    " idempotency_key, status, attempt, max_attempts, lease_owner, provider_ref, outcome_digest,"
    " outcome_token, parent_id, provenance, version, created_at, updated_at"
)
INSERT_EFFECT_VALUES = (
    "%(id)s, %(agent)s, %(key)s::text, %(run)s, %(step)s, (SELECT last_seq FROM run), 'action',"
    " %(tool)s, %(target)s, %(request)s, %(request_hash)s, %(idempotency_key)s, 'dispatching',"
    " 1, %(max_attempts)s, %(owner)s, '', '', '', NULL::uuid, %(provenance)s, 1, now(), now()"
)
# How long a thread trusts a key it has looked up (the ledger's agentkeys.RECHECK_SECONDS).
RECHECK_SECONDS = 0.2
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
SQL_INTENT_CLAIM = """
WITH run AS (
  INSERT INTO ledger_run (agent_id, run_id, last_seq, created_at)
  SELECT %(agent)s, %(run)s, 1, now()
  WHERE NOT EXISTS (SELECT 1 FROM ledger_effect
                   WHERE agent_id = %(agent)s AND effect_key = %(key)s::text)
  ON CONFLICT (agent_id, run_id) DO UPDATE SET last_seq = ledger_run.last_seq + 1
  RETURNING last_seq
), effect AS (
  INSERT INTO ledger_effect ({columns}, lease_token, claim_id, lease_seconds, lease_expires_at)
  SELECT {values}, %(token)s::text, %(claim_id)s::text, %(lease)s,
         now() + make_interval(secs => %(lease)s)
  WHERE EXISTS (SELECT 1 FROM run)
  ON CONFLICT (agent_id, effect_key) DO NOTHING RETURNING *
), events AS (
  INSERT INTO ledger_effectevent
    (effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
  SELECT effect.id, v.kind, %(actor)s::text, v.from_status, v.to_status, v.reason, v.data::jsonb,
         v.digest, now()
  FROM effect, (VALUES (1, 'intent', '', 'planned', 'intent', %(intent_data)s, %(intent_digest)s),
                       (2, 'transition', 'planned', 'dispatching', 'claimed', %(claim_data)s,
                        %(claim_digest)s))
       AS v(n, kind, from_status, to_status, reason, data, digest)
  ORDER BY v.n
)
SELECT * FROM effect
"""
SQL_EFFECT_READ = (
    "SELECT *, EXISTS (SELECT 1 FROM ledger_effectdependency d"
    " WHERE d.downstream_id = ledger_effect.id) AS has_upstream"
    " FROM ledger_effect WHERE id = %s AND agent_id = %s"
)
SQL_OUTCOME_WRITE = """
WITH moved AS (
  UPDATE ledger_effect SET status = %(status)s::text, version = version + 1,
    updated_at = now(), outcome_digest = %(digest)s, outcome_token = %(token)s::text,
    provider_ref = %(ref)s,
    response = %(response)s, lease_token = NULL, claim_id = NULL, lease_expires_at = NULL,
    lease_seconds = NULL, left_dispatch_at = LEAST(now(), lease_expires_at),
    resolved_at = now(), next_check_at = NULL
  WHERE id = %(id)s AND status = 'dispatching' AND version = %(version)s
    AND lease_token = %(token)s::text AND lease_expires_at > now()
  RETURNING *
), events AS (
  INSERT INTO ledger_effectevent
    (effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
  SELECT moved.id, 'transition', %(actor)s::text, 'dispatching', %(status)s::text,
         %(status)s::text,
         %(data)s::jsonb, %(data_digest)s, now() FROM moved
)
SELECT * FROM moved
"""
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
    """The ledger's success-path statements on one psycopg connection (one per thread)."""

    intent_claim_sql: str | None = None  # built once per process, from the live schema

    def __init__(self, url: str) -> None:
        # Autocommit, server-side binding and psycopg's automatic preparation, as the ledger's
        # hot path (settings.DATABASES: prepare_threshold).
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row, prepare_threshold=2)
        self.agents: dict[str, tuple[float, dict[str, Any] | None]] = {}
        if BareLedger.intent_claim_sql is None:
            BareLedger.intent_claim_sql = self._intent_claim_sql()

    def _intent_claim_sql(self) -> str:
        named = {c.strip() for c in INSERT_EFFECT_COLUMNS.split(",")}
        named |= {"lease_token", "claim_id", "lease_seconds", "lease_expires_at"}
        extra = [
            (row["column_name"], _ZERO_BY_TYPE[row["data_type"]])
            for row in self.conn.execute(SQL_REQUIRED_COLUMNS).fetchall()
            if row["column_name"] not in named and row["data_type"] in _ZERO_BY_TYPE
        ]
        columns = INSERT_EFFECT_COLUMNS + "".join(f", {name}" for name, _ in extra)
        values = INSERT_EFFECT_VALUES + "".join(f", {zero}" for _, zero in extra)
        return SQL_INTENT_CLAIM.replace("{columns}", columns).replace("{values}", values)

    def close(self) -> None:
        self.conn.close()

    def _agent(self, authorization: str) -> dict[str, Any] | None:
        key = authorization.removeprefix("Bearer ").strip()
        if not key.startswith("elk_") or len(key) > 200:
            return None
        seen = self.agents.get(key)
        if seen is not None and time.monotonic() - seen[0] <= RECHECK_SECONDS:
            return seen[1]
        # elk_<mode>_<12-hex prefix>_<secret>, or elk_<prefix>_<secret> for keys from before modes.
        parts = key.split("_")
        prefix = parts[2] if parts[1] in ("test", "live") else parts[1]
        row = self.conn.execute(SQL_AGENT, [prefix]).fetchone()
        digest = hashlib.sha256(key.encode()).hexdigest()
        agent = row if row is not None and hmac.compare_digest(row["digest"], digest) else None
        self.agents[key] = (time.monotonic(), agent)
        return agent

    def _tool(self, name: str) -> dict[str, Any]:
        """Tool policies are cached by the ledger's processes: read once per thread here."""
        tools: dict[str, dict[str, Any]] = self.__dict__.setdefault("tools", {})
        if name not in tools:
            tools[name] = self.conn.execute(SQL_TOOL, [name]).fetchone() or {"max_attempts": 3}
        return tools[name]

    def _show(
        self, effect: dict[str, Any], agent_name: str, *, claimer: bool, upstream: bool = False
    ) -> dict[str, Any]:
        rows = self.conn.execute(SQL_UPSTREAMS, [[effect["id"]]]).fetchall() if upstream else []
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
        """Intent + claim as one statement (`POST /api/v1/effects` with `claim: true`)."""
        agent = self._agent(authorization)
        if agent is None:
            return _error(401, "unauthorized", "A valid agent key is required.")
        data = json.loads(body)
        if not data.get("claim"):
            return _error(409, "invalid_transition", "This baseline records claimed intents only.")
        actor = f"agent:{agent['name']}"
        tool = self._tool(data["tool"])
        effect_key = data.get("effect_key") or f"{data['run_id']}:{data['step_id']}"
        hashed = {"tool": data["tool"], "target": data["target"], "request": data["request"]}
        request_hash = "v1:" + _mac("request", _canonical(hashed))
        owner, claim_id = data.get("owner", ""), data.get("claim_id")
        lease = int(data.get("lease_seconds") or 60)
        token = secrets.token_urlsafe(24)
        intent_data = {"request_hash": request_hash, "depends_on": []}
        claim_data = {"owner": owner, "claim_id": claim_id, "lease_seconds": lease}
        assert BareLedger.intent_claim_sql is not None
        effect = self.conn.execute(
            BareLedger.intent_claim_sql,
            {
                "id": uuid.uuid4(),
                "agent": agent["id"],
                "key": effect_key,
                "run": data["run_id"],
                "step": data["step_id"],
                "tool": data["tool"],
                "target": data["target"],
                "request": Jsonb(data["request"]),
                "request_hash": request_hash,
                "idempotency_key": _idempotency_key(agent["id"], effect_key),
                "max_attempts": tool["max_attempts"],
                "owner": owner,
                "provenance": Jsonb(data.get("provenance") or {}),
                "token": token,
                "claim_id": claim_id,
                "lease": lease,
                "actor": actor,
                "intent_data": _canonical(intent_data),
                "intent_digest": _digest(intent_data),
                "claim_data": _canonical(claim_data),
                "claim_digest": _digest(claim_data),
            },
        ).fetchone()
        if effect is None:
            return _error(409, "effect_key_conflict", "This baseline records new intents only.")
        return 201, self._show(effect, agent["name"], claimer=True)

    def post_outcome(self, authorization: str, effect_id: str, body: bytes) -> Reply:
        """The lease holder's report (`POST /api/v1/effects/{id}/outcome`): read, then write."""
        agent = self._agent(authorization)
        if agent is None:
            return _error(401, "unauthorized", "A valid agent key is required.")
        data = json.loads(body)
        effect = self.conn.execute(SQL_EFFECT_READ, [effect_id, agent["id"]]).fetchone()
        if effect is None:
            return _error(404, "not_found", "No such effect.")
        self._tool(effect["tool"])
        status, token = data["status"], data["lease_token"]
        if status not in _RESOLVING:
            return _error(409, "invalid_transition", "This baseline reports final outcomes only.")
        provider_ref, response = data.get("provider_ref", ""), data.get("response")
        outcome = {"token": token, "status": status, "provider_ref": provider_ref}
        event = {"outcome": status, "provider_ref": provider_ref, "response": response}
        moved = self.conn.execute(
            SQL_OUTCOME_WRITE,
            {
                "status": status,
                "digest": _mac("value", _canonical({**outcome, "response": response})),
                "token": token,
                "ref": provider_ref,
                "response": Jsonb(response),
                "id": effect["id"],
                "version": effect["version"],
                "actor": f"agent:{agent['name']}",
                "data": _canonical(event),
                "data_digest": _digest(event),
            },
        ).fetchone()
        if moved is None:
            return _error(409, "stale_lease", "This lease token no longer holds the effect.")
        return 200, self._show(moved, agent["name"], claimer=False, upstream=effect["has_upstream"])

    def health(self) -> Reply:
        self.conn.execute("SELECT 1").fetchone()
        return 200, {"status": "ok", "database": "ok"}


def _idempotency_key(agent_id: int, effect_key: str) -> str:
    return "el_" + _mac("idempotency", f"{agent_id}\x00{effect_key}")[:32]


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(data).encode()).hexdigest()


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
