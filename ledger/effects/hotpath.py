"""The agent API's success path: one autocommit statement per write, no ORM instances.

What an agent does around every side effect is two calls: `POST /effects` with `claim: true`
(intent and claim) and `POST /effects/{id}/outcome`. Each used to be a transaction of up to a
dozen statements. Here each is one data-modifying statement, committed on its own:

- **intent (+ claim)**: the run's next `seq` (an upsert), the effect (inserted `planned`, or
  `dispatching` with its lease when claimed) and its events (`intent`, and `claimed`) in one
  `WITH … INSERT`. PostgreSQL's triggers on an effect inserted `dispatching` apply the halts
  (0008/0014) and limits (0014) inside that same statement, so the claim commits with its
  checks or not at all; a refusal is raised by the trigger and answered 409 / 429.
- **outcome**: the fenced UPDATE (the token must still hold an unexpired lease, by the database
  clock) and its event in one `WITH … UPDATE`, after one read of the effect.

Authentication, the tool's policy and the configuration version come from the key's read,
which each process repeats at most every `agentkeys.RECHECK_SECONDS`; the caller's key stamp
(`keyuse`) rides along as one more `WITH`. Statements run on a server-side-binding psycopg
cursor, so that psycopg prepares them after `prepare_threshold` uses (settings.DATABASES).

Anything off the success path returns None here and the caller takes the general path in
`ledger.effects.intents` / `ledger.effects.outcomes`, which has every rule: an effect that exists
already (a
repeat, a conflict), `depends_on` (the interlock), four-eyes approval, a `callback_url` (its
callbacks come from the status-change trigger, which an INSERT does not fire), a report from a token
that no longer holds the lease, outcomes other than confirmed / awaiting_confirmation, and
compensations. The rules themselves are not written twice: the columns and events come from
the same functions the general path uses (`intents.effect_row`, `outcomes.read_report`,
`transitions.entry_columns`, `transitions.event_values`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import psycopg
from django.db import connection, models, transaction

from ledger.effects.intents import Intent, effect_row
from ledger.effects.outcomes import FENCE, evidence, read_report
from ledger.effects.transitions import (
    EVENT_COLUMNS,
    SqlExpr,
    column_values,
    entry_columns,
    event_values,
    seconds_from_now,
)
from ledger.models import Effect, EffectDependency, EffectEvent, EventKind, Run
from ledger.models.states import Kind, Status
from ledger.observability.metrics import count_transition
from ledger.policy import digests, keyuse
from ledger.policy.tools import Policy

_EFFECTS = Effect._meta.db_table
_EVENTS = EffectEvent._meta.db_table
_RUNS = Run._meta.db_table
_DEPENDENCIES = EffectDependency._meta.db_table
# Django hands jsonb over as text (its JSONField decodes it): so do we, with the same decoders.
_JSON = {
    f.column: f.decoder for f in Effect._meta.concrete_fields if isinstance(f, models.JSONField)
}
_CASTS = {f.column: f.cast_db_type(connection) for f in Effect._meta.concrete_fields}
# The columns these statements return: what the API shows and an outcome needs, named rather
# than `*`, so that a column added by a migration does not change the result type of a
# statement prepared before it ("cached plan must not change result type").
_RETURNED = (
    "id, effect_key, run_id, step_id, seq, tool, target, kind, status, attempt, max_attempts, "
    "idempotency_key, lease_owner, lease_token, lease_seconds, lease_expires_at, provider_ref, "
    "request, response, error, parent_id, provenance, created_at, updated_at, resolved_at, "
    "outcome_digest, outcome_token, version, requested_by"
)
# The outcomes this path writes: they need nothing else done in the same transaction.
_SIMPLE_OUTCOMES = frozenset({Status.CONFIRMED, Status.AWAITING_CONFIRMATION})


class EffectRow(SimpleNamespace):
    """An effect's columns as attributes (what `serialize.effect_dict` reads); not a model."""


def _rows(cursor: psycopg.Cursor[Any]) -> Any:
    names = [column.name for column in cursor.description or ()]

    def make(values: Sequence[Any]) -> EffectRow:
        row = dict(zip(names, values, strict=True))
        for column, decoder in _JSON.items():
            if isinstance(row.get(column), str):
                row[column] = json.loads(row[column], cls=decoder)
        return EffectRow(**row)

    return make


@contextlib.contextmanager
def _savepoint_if_nested() -> Iterator[None]:
    """A statement that fails inside someone's transaction (a test's, a management command's)
    must leave it usable; the API itself runs in autocommit, where this adds nothing."""
    if connection.in_atomic_block:
        with transaction.atomic():
            yield
    else:
        yield


def _one(sql: str, params: Sequence[Any]) -> EffectRow | None:
    """Run one statement on a server-side-binding cursor (preparable); its first row, or None.
    Database errors come out as Django's (the API's 503 and the triggers' refusals rely on it)."""
    connection.ensure_connection()
    connection.validate_thread_sharing()
    with _savepoint_if_nested(), psycopg.Cursor(connection.connection, row_factory=_rows) as raw:
        # In Django's wrapper: its error translation, execute_wrapper hooks and query log
        # (tests count queries through them) apply as to any other query.
        cursor = (
            connection.make_debug_cursor(raw)
            if connection.queries_logged
            else connection.make_cursor(raw)
        )
        cursor.execute(sql, params)
        return cursor.fetchone()


def _with(*ctes: str) -> str:
    """`WITH a AS (…), b AS (…) `, leaving out empty ones (a key stamp that is not due)."""
    return "WITH " + ", ".join(c for c in ctes if c) + " "


def record_new_intent(
    agent: Any,
    intent: Intent,
    policy: Policy,
    *,
    actor: str,
    claim: dict[str, Any] | None,
) -> EffectRow | None:
    """Record a new planned intent, claimed with it when `claim` (owner, claim_id,
    lease_seconds) is given; None when an effect with this key exists already (the caller
    then takes the general path, which knows repeats and conflicts)."""
    events, lease = _intent_events(intent, actor, claim)
    values = effect_row(
        agent,
        intent,
        policy.redactor,
        status=Status.DISPATCHING if claim is not None else Status.PLANNED,
        max_attempts=policy.max_attempts,
        seq=SqlExpr("(SELECT last_seq FROM run)"),
        **lease,
    )
    columns, placeholders, params = column_values(values)
    stamp, stamp_params = keyuse.stamp_cte(only_if="EXISTS (SELECT 1 FROM effect)")
    sql = _intent_sql(columns, placeholders, len(events), stamp)
    all_params = [
        agent.id,
        intent.run_id,
        agent.id,
        values["effect_key"],
        *params,
        *[value for event in events for value in event],
        *stamp_params,
    ]
    row = _one(sql, all_params)
    if row is not None and claim is not None:
        count_transition(Status.PLANNED, Status.DISPATCHING)
    return row


def _intent_events(
    intent: Intent, actor: str, claim: dict[str, Any] | None
) -> tuple[list[Sequence[Any]], dict[str, Any]]:
    """The new effect's events (`intent`, and `claimed` with a claim) and its lease columns."""
    events = [
        event_values(
            kind=EventKind.INTENT,
            actor=actor,
            to_status=Status.PLANNED,
            reason="intent",
            data={
                "request_hash": digests.request_hash(intent.tool, intent.target, intent.request),
                "depends_on": [],
            },
        )
    ]
    if claim is None:
        return events, {}
    token = secrets.token_urlsafe(24)
    lease = {
        "attempt": 1,
        "lease_owner": claim["owner"],
        "lease_token": token,
        "claim_id": claim["claim_id"],
        "lease_seconds": claim["lease_seconds"],
        "lease_expires_at": seconds_from_now(claim["lease_seconds"]),
    }
    data = {key: claim[key] for key in ("owner", "claim_id", "lease_seconds")}
    events.append(
        event_values(
            kind=EventKind.TRANSITION,
            actor=actor,
            from_status=Status.PLANNED,
            to_status=Status.DISPATCHING,
            reason="claimed",
            data={**data, "lease": digests.lease_digest(token)},
        )
    )
    return events, lease


def _intent_sql(columns: list[str], placeholders: list[str], events: int, stamp: str) -> str:
    """The intent's one statement: the run's next seq, the effect and its events, the key's
    stamp. Its text depends only on the columns and the number of events, so that psycopg
    prepares each shape once."""
    # Typed: in a SELECT list, a parameter PostgreSQL cannot type (NULL, text) would be text.
    typed = [
        f"%s::{_CASTS[column]}" if sql == "%s" else sql
        for column, sql in zip(columns, placeholders, strict=True)
    ]
    # Nothing is inserted (no trigger runs, no seq is used) for a key that exists already.
    absent = f"NOT EXISTS (SELECT 1 FROM {_EFFECTS} WHERE agent_id = %s AND effect_key = %s)"
    rows = ", ".join(f"({n}, %s, %s, %s, %s, %s, %s::jsonb, %s)" for n in range(1, events + 1))
    return (
        _with(
            f"run AS (INSERT INTO {_RUNS} (agent_id, run_id, last_seq, created_at) "
            f"SELECT %s, %s, 1, now() WHERE {absent} "
            f"ON CONFLICT (agent_id, run_id) DO UPDATE SET last_seq = {_RUNS}.last_seq + 1 "
            "RETURNING last_seq)",
            f"effect AS (INSERT INTO {_EFFECTS} ({', '.join(columns)}, created_at, updated_at) "
            f"SELECT {', '.join(typed)}, now(), now() WHERE EXISTS (SELECT 1 FROM run) "
            f"ON CONFLICT (agent_id, effect_key) DO NOTHING RETURNING {_RETURNED})",
            f"events AS (INSERT INTO {_EVENTS} (effect_id, {EVENT_COLUMNS}, created_at) "
            f"SELECT effect.id, v.kind, v.actor, v.from_status, v.to_status, v.reason, v.data, "
            f"v.digest, now() FROM effect, (VALUES {rows}) "
            "AS v(n, kind, actor, from_status, to_status, reason, data, digest) ORDER BY v.n)",
            stamp,
        )
        + "SELECT * FROM effect"
    )


def read_effect(effect_id: Any, agent_id: int) -> EffectRow | None:
    """The caller's effect, and whether it has upstream effects (`has_upstream`)."""
    return _one(
        f"SELECT {_RETURNED}, EXISTS (SELECT 1 FROM {_DEPENDENCIES} d "
        f"WHERE d.downstream_id = {_EFFECTS}.id) AS has_upstream "
        f"FROM {_EFFECTS} WHERE id = %s AND agent_id = %s",
        [effect_id, agent_id],
    )


def record_simple_outcome(
    effect: EffectRow,
    *,
    token: str,
    status: str,
    provider_ref: str,
    response: Any,
    error: Any,
    actor: str,
    policy: Policy,
) -> EffectRow | None:
    """The report of the lease holder of an action that the provider did it (`confirmed`) or
    accepted it (`accepted` → awaiting_confirmation), as one fenced statement; the effect as it
    was when the report is a repeat. None for anything else, or when the fenced write found
    the lease gone: the general path then decides (and keeps a late report as evidence)."""
    if effect.kind != Kind.ACTION:
        return None
    report = read_report(
        effect,
        token=token,
        status=status,
        provider_ref=provider_ref,
        response=response,
        error=error,
        policy=policy,
    )
    if report.repeated:
        return effect
    if not report.holds_lease or report.target not in _SIMPLE_OUTCOMES:
        return None
    sets, params = _outcome_sets(entry_columns(effect.status, report.target, report.changes))
    event = event_values(
        kind=EventKind.TRANSITION,
        actor=actor,
        from_status=effect.status,
        to_status=report.target,
        reason=status,
        data=evidence(report.changes, status),
    )
    stamp, stamp_params = keyuse.stamp_cte(only_if="EXISTS (SELECT 1 FROM moved)")
    moved = _one(
        _outcome_sql(sets, stamp),
        [
            str(report.target),
            *params,
            effect.id,
            effect.status,
            effect.version,
            token,
            *event,
            *stamp_params,
        ],
    )
    if moved is None:
        return None
    count_transition(effect.status, report.target)
    moved.has_upstream = effect.has_upstream
    return moved


def _outcome_sets(changes: dict[str, Any]) -> tuple[str, list[Any]]:
    """The outcome UPDATE's SET list (the new status first, as `%s`) and the changes' values."""
    columns, placeholders, params = column_values(changes)
    sets = ", ".join(
        ["status = %s", "version = version + 1", "updated_at = now()"]
        + [f"{column} = {sql}" for column, sql in zip(columns, placeholders, strict=True)]
    )
    return sets, params


def _outcome_sql(sets: str, stamp: str) -> str:
    """The outcome's one statement: the fenced move (the token must still hold an unexpired
    lease, by the database clock), its event and the key's stamp."""
    return (
        _with(
            f"moved AS (UPDATE {_EFFECTS} SET {sets} WHERE id = %s AND status = %s "
            f"AND version = %s AND {FENCE} RETURNING {_RETURNED})",
            f"events AS (INSERT INTO {_EVENTS} (effect_id, {EVENT_COLUMNS}, created_at) "
            "SELECT moved.id, %s, %s, %s, %s, %s, %s::jsonb, %s, now() FROM moved)",
            stamp,
        )
        + "SELECT * FROM moved"
    )
