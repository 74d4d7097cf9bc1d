"""The one writer of `Effect.status`.

Every transition is one transaction: a conditional `UPDATE … WHERE id = %s AND status = %s AND
version = %s RETURNING …` (no row back means someone else moved the effect first) plus one
appended `EffectEvent`. Lease and deadline arithmetic uses the database clock (`now()`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import JSONField
from django.db.models.functions import Now

from ledger import jsonenc
from ledger.effects.interlocks import cancel_dependents
from ledger.errors import (
    AttemptsExhausted,
    Blocked,
    InvalidTransition,
    LedgerError,
    StaleLease,
)
from ledger.models import Effect, EffectEvent, EventKind, Reason, ReviewItem
from ledger.models.states import UPSTREAM_DEAD, Kind, Status, is_allowed
from ledger.observability.metrics import count_transition
from ledger.policy import digests, keyuse
from ledger.rules.events import EVENT_COLUMNS, event_values, record_event
from ledger.rules.four_eyes import refuse_claim
from ledger.rules.halts import active_halt_for, claim_refusal
from ledger.rules.halts import refusal as halt_refusal
from ledger.rules.halts import refusal_from_trigger as halt_refusal_from_trigger
from ledger.rules.interlocks import blocked_by
from ledger.rules.limits import NON_RECEIPT, release, release_sql
from ledger.rules.limits import refusal_from_trigger as limit_refusal
from ledger.rules.reviewqueue import close_settled_reviews, open_review, settles

# Statuses that end the effect's own story (compensation aside): `resolved_at` is set on entry.
_RESOLVING = frozenset({Status.CONFIRMED, Status.FAILED, Status.CANCELLED, Status.COMPENSATED})
# The provenance mark of a compensation that undoes the provider's duplicate of its parent
# (`ledger.effects.compensation.compensate(duplicate=True)`): once it is confirmed the parent stays
# confirmed, since its own charge stands.
DUPLICATE_REFUND = "refunds_duplicate"
# A compensation that ended so leaves its parent confirmed, and a person must look at it.
_COMPENSATION_TROUBLE = {
    Status.FAILED: Reason.COMPENSATION_FAILED,
    Status.UNKNOWN: Reason.COMPENSATION_UNKNOWN,
}
_EFFECT_TABLE = Effect._meta.db_table
_EVENT_TABLE = EffectEvent._meta.db_table
_FIELD_BY_COLUMN = {f.column: f for f in Effect._meta.concrete_fields}


class Superseded(Exception):
    """The effect's status or version changed between reading and writing it."""


@dataclass(frozen=True)
class SqlExpr:
    """A SQL expression for a SET clause, evaluated by the database (its clock, its counters)."""

    sql: str
    params: tuple[Any, ...] = ()


def seconds_from_now(seconds: float) -> SqlExpr:
    return SqlExpr("now() + make_interval(secs => %s)", (seconds,))


def one_effect(sql: str, params: Sequence[Any]) -> Effect | None:
    """The effect a raw statement returns (`SELECT *` or `… RETURNING *`), or None."""
    return next(iter(Effect.objects.raw(sql, params)), None)


def column_values(values: Mapping[str, Any]) -> tuple[list[str], list[str], list[Any]]:
    """Effect values by field or column name as (columns, SQL placeholders, parameters): an
    `SqlExpr` goes in as SQL, anything else as a parameter prepared by its model field."""
    columns, placeholders, params = [], [], []
    for name, value in values.items():
        field = _FIELD_BY_COLUMN.get(name) or Effect._meta.get_field(name)
        columns.append(field.column)
        if isinstance(value, SqlExpr):
            placeholders.append(value.sql)
            params.extend(value.params)
        else:
            placeholders.append("%s")
            params.append(field.get_db_prep_save(value, connection))
    return columns, placeholders, params


def _update(
    effect: Effect,
    to: Status,
    changes: Mapping[str, Any],
    where: Sequence[tuple[str, Sequence[Any]]] = (),
) -> Effect | None:
    """The conditional UPDATE; None when the row no longer matches (someone else won)."""
    columns, placeholders, params = column_values(changes)
    sets = ["status = %s", "version = version + 1", "updated_at = now()"]
    sets += [f"{column} = {sql}" for column, sql in zip(columns, placeholders, strict=True)]
    params = [str(to), *params]
    conditions = ["id = %s", "status = %s", "version = %s"]
    params += [effect.id, effect.status, effect.version]
    for condition, condition_params in where:
        conditions.append(condition)
        params.extend(condition_params)
    sql = (
        f"UPDATE {_EFFECT_TABLE} SET {', '.join(sets)} WHERE {' AND '.join(conditions)} RETURNING *"
    )
    return one_effect(sql, params)


def entry_columns(
    from_status: str, to: Status, changes: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The columns a move from `from_status` to `to` sets besides `changes`: leaving
    dispatching clears the lease, entering a resolved status stamps `resolved_at`."""
    columns: dict[str, Any] = dict(changes or {})
    if from_status == Status.DISPATCHING:
        # Leaving dispatching clears the lease: no token can write after this.
        columns.update(
            lease_token=None,
            claim_id=None,
            lease_expires_at=None,
            lease_seconds=None,
            # The last moment a request could have left: the report, or the lease's end.
            left_dispatch_at=SqlExpr("LEAST(now(), lease_expires_at)"),
        )
    if to in _RESOLVING:
        columns.update(resolved_at=SqlExpr("now()"), next_check_at=None)
    return columns


def transition(
    effect: Effect,
    to: Status,
    *,
    actor: str,
    reason: str = "",
    changes: Mapping[str, Any] | None = None,
    where: Sequence[tuple[str, Sequence[Any]]] = (),
    data: Mapping[str, Any] | None = None,
) -> Effect:
    """Move `effect` to `to`, or raise `InvalidTransition` / `Superseded`.

    `changes` are further columns to set (an `SqlExpr` for values the database computes),
    `where` further conditions the row must still meet, `data` what the event records.
    """
    if not is_allowed(effect.status, to):
        raise InvalidTransition(
            f"An effect in {effect.status} cannot move to {to}.",
            status=effect.status,
        )
    columns = entry_columns(effect.status, to, changes)
    # No savepoint (they cost round trips on the hot path): refusals are raised outside the
    # block, so an exception inside it is a real failure and the outer transaction, if any,
    # is the unit that rolls back.
    with transaction.atomic(savepoint=False):
        moved = _update(effect, to, columns, where)
        if moved is None:
            superseded = True
        else:
            superseded = False
            record_event(
                moved.id,
                kind=EventKind.TRANSITION,
                actor=actor,
                from_status=effect.status,
                to_status=to,
                reason=reason,
                data=data,
            )
            count_transition(effect.status, to)
            if reason in NON_RECEIPT:
                release(moved.id)  # proof it never left: its amount stops counting
            _follow_on(moved, actor=actor)
            if settles(actor, to, reason):
                close_settled_reviews([moved.id], status=to, actor=actor, reason=reason)
    if superseded or moved is None:
        raise Superseded(effect.id)
    return moved


def _follow_on(effect: Effect, *, actor: str) -> None:
    """What a transition implies for other effects, inside the same transaction."""
    if effect.status in UPSTREAM_DEAD:
        cancel_dependents(effect.id)
    if effect.kind == Kind.COMPENSATION and effect.parent_id:
        parent = Effect.objects.get(pk=effect.parent_id)
        if effect.status == Status.CONFIRMED and _refunds_duplicate(effect):
            # The provider's second copy is undone; the parent itself still stands.
            record_event(
                parent.id,
                kind=EventKind.TRANSITION,
                actor=actor,
                from_status=parent.status,
                to_status=parent.status,
                reason="duplicate_refunded",
                data={"compensation": str(effect.id)},
            )
        elif effect.status == Status.CONFIRMED and parent.status == Status.CONFIRMED:
            transition(
                parent,
                Status.COMPENSATED,
                actor=actor,
                reason="compensation_confirmed",
                data={"compensation": str(effect.id)},
            )
        elif effect.status in _COMPENSATION_TROUBLE:
            open_review(parent.id, _COMPENSATION_TROUBLE[effect.status])


def _refunds_duplicate(compensation: Effect) -> bool:
    policy = (compensation.provenance or {}).get("policy")
    return isinstance(policy, dict) and policy.get(DUPLICATE_REFUND) is True


@dataclass(frozen=True)
class Move:
    """One effect's transition for `transition_many`: what `transition` takes, per effect.
    `before` are further events (`event_values(...)` lists) recorded just ahead of the
    transition's own, and only if the effect moves: the evidence that led to it."""

    effect: Effect  # as read: its id, status and version are what the UPDATE must still find
    to: Status
    reason: str = ""
    changes: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] | None = None
    before: Sequence[Sequence[Any]] = ()


def transition_many(
    moves: Sequence[Move],
    *,
    actor: str,
    where: Sequence[tuple[str, Sequence[Any]]] = (),
) -> set[Any]:
    """`transition` for many effects at once, in one statement per shape of move (same from
    and to status, same columns): each effect's UPDATE, its events and, on proof of
    non-receipt, the release of its amount are one `WITH … UPDATE … FROM json_to_recordset`, so an
    effect either moves with all of it or leaves no trace. Returns the ids that moved; an
    effect someone else moved meanwhile is simply not among them (no `Superseded`). Counts,
    follow-ons and the columns set on entry are `transition`'s own. Raises `InvalidTransition`
    before writing anything if any move is not allowed."""
    if len({move.effect.id for move in moves}) < len(moves):
        raise ValueError("transition_many: an effect may move only once per call")
    for move in moves:
        if not is_allowed(move.effect.status, move.to):
            raise InvalidTransition(
                f"An effect in {move.effect.status} cannot move to {move.to}.",
                status=move.effect.status,
            )
    groups: dict[tuple[Any, ...], list[tuple[Move, list[Any]]]] = {}
    for move in moves:
        values = entry_columns(move.effect.status, move.to, move.changes)
        # Per-row values travel as data; database expressions (and NULL, the value of most
        # columns a move clears) are written in the statement, the same for its whole group.
        shape = tuple(
            (name, value.sql, value.params)
            if isinstance(value, SqlExpr)
            else (name, "NULL", ())
            if value is None
            else (name,)
            for name, value in values.items()
        )
        key = (str(move.effect.status), str(move.to), move.reason in NON_RECEIPT, shape)
        row = [values[name] for name, *expr in shape if not expr]
        groups.setdefault(key, []).append((move, row))
    moved: set[Any] = set()
    with transaction.atomic(savepoint=False):
        for (_, _, releases, shape), members in groups.items():
            rows = _move_group(members, shape, actor=actor, where=where, releases=releases)
            for effect_id, status, _ in rows:
                moved.add(effect_id)
                count_transition(members[0][0].effect.status, status)
            to, reason = members[0][0].to, members[0][0].reason
            if rows and settles(actor, to, reason):
                ids = [i for i, _, _ in rows]
                close_settled_reviews(ids, status=to, actor=actor, reason=reason)
            # Rare (a failed upstream, a compensation): the follow-ons work on whole effects.
            following = [
                i
                for i, status, kind in rows
                if status in UPSTREAM_DEAD or kind == Kind.COMPENSATION
            ]
            if following:
                for effect in Effect.objects.filter(pk__in=following).order_by("pk"):
                    _follow_on(effect, actor=actor)
    return moved


def _move_group(
    members: Sequence[tuple[Move, list[Any]]],
    shape: tuple[tuple[Any, ...], ...],
    *,
    actor: str,
    where: Sequence[tuple[str, Sequence[Any]]],
    releases: bool,
) -> list[tuple[Any, str, str]]:
    """One statement for moves of one shape; (id, status, kind) of each row that moved. The
    per-effect values and events travel as two JSON documents (`json_to_recordset`): one
    string each to quote, where arrays or VALUES cost a parameter per value."""
    first = members[0][0]
    record, rows = _recordset(members, shape)
    sets, params = _assignments(shape, first)
    params.append(rows)
    # Joined by primary key: each row of the recordset finds its effect through the index
    # (PostgreSQL takes any function's recordset for 100 rows, so it plans a nested loop over
    # it). An `id = ANY(…)` list as well made it match every row of the list against every
    # effect found by the list: quadratic, 1.8 s for 4,800 moves.
    conditions = ["id = v._id", "status = %s", "version = v._version"]
    params.append(str(first.effect.status))
    for condition, condition_params in where:
        conditions.append(condition)
        params.extend(condition_params)
    params.append(_events_document(members, actor))
    ctes = [
        f"moved AS (UPDATE {_EFFECT_TABLE} SET {', '.join(sets)} "
        f"FROM json_to_recordset(%s::json) AS v({record}) "
        f"WHERE {' AND '.join(conditions)} RETURNING id, status, kind, v._n)",
        f"events AS (INSERT INTO {_EVENT_TABLE} (effect_id, {EVENT_COLUMNS}, created_at) "
        "SELECT moved.id, e.kind, e.actor, e.from_status, e.to_status, e.reason, e.data, "
        "e.digest, now() FROM moved JOIN json_to_recordset(%s::json) AS e(n int, k int, "
        "kind text, actor text, from_status text, to_status text, reason text, data jsonb, "
        "digest text) ON e.n = moved._n ORDER BY e.k)",
    ]
    if releases:
        # Proof it never left: its amount stops counting (`ledger.rules.limits`).
        ctes.append(f"released AS ({release_sql('SELECT id FROM moved')})")
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(ctes)} SELECT id, status, kind FROM moved", params)
        return cursor.fetchall()


def _recordset(
    members: Sequence[tuple[Move, list[Any]]], shape: tuple[tuple[Any, ...], ...]
) -> tuple[str, str]:
    """The per-effect values as a JSON document, and its record type for json_to_recordset:
    `_n` (the member's number), the effect's id and version, then one `_c<i>` per column of the
    shape that has a value of its own (the rest are SQL expressions, the same for all)."""
    key = [_FIELD_BY_COLUMN["id"], _FIELD_BY_COLUMN["version"]]
    per_row = [
        _FIELD_BY_COLUMN.get(name) or Effect._meta.get_field(name)
        for name, *expr in shape
        if not expr
    ]
    # Named apart from the table's columns, so that the table's unqualified names (in `where`
    # conditions and SqlExpr) still mean the effect's own.
    names = ["_id", "_version", *(f"_c{i}" for i in range(len(per_row)))]
    rows = []
    for n, (move, row) in enumerate(members, start=1):
        values = [move.effect.id, move.effect.version, *row]
        rows.append(
            f'{{"_n":{n}'
            + "".join(
                f',"{name}":{_json_value(f, value)}'
                for name, f, value in zip(names, key + per_row, values, strict=True)
            )
            + "}"
        )
    record = ", ".join(
        ["_n int"]
        + [
            f"{name} {f.cast_db_type(connection)}"
            for name, f in zip(names, key + per_row, strict=True)
        ]
    )
    return record, "[" + ",".join(rows) + "]"


def _assignments(shape: tuple[tuple[Any, ...], ...], first: Move) -> tuple[list[str], list[Any]]:
    """The UPDATE's SET list and its parameters: the new status, then each column of the
    shape, from the recordset (`v._c<i>`) or as its SQL expression."""
    sets = ["status = %s", "version = version + 1", "updated_at = now()"]
    params: list[Any] = [str(first.to)]
    column = 0
    for name, *expr in shape:
        target = (_FIELD_BY_COLUMN.get(name) or Effect._meta.get_field(name)).column
        if expr:
            sets.append(f"{target} = {expr[0]}")
            params.extend(expr[1])
        else:
            sets.append(f"{target} = v._c{column}")
            column += 1
    return sets, params


def _events_document(members: Sequence[tuple[Move, list[Any]]], actor: str) -> str:
    """Every member's events (those it records before its move, then the move's own) as one
    JSON document, numbered by member (`n`) and in order (`k`)."""
    events = []
    for n, (move, _) in enumerate(members, start=1):
        transition_event = event_values(
            kind=EventKind.TRANSITION,
            actor=actor,
            from_status=move.effect.status,
            to_status=move.to,
            reason=move.reason,
            data=move.data,
        )
        for event in [*move.before, transition_event]:
            kind, actor_, from_status, to_status, reason, data, digest = event
            events.append(
                f'{{"n":{n},"k":{len(events)},"kind":{_text(kind)},"actor":{_text(actor_)},'
                f'"from_status":{_text(from_status)},"to_status":{_text(to_status)},'
                f'"reason":{_text(reason)},"data":{data},"digest":{_text(digest)}}}'
            )
    return "[" + ",".join(events) + "]"


def _text(value: Any) -> str:
    """A string as JSON (the C encoder: these are many and short)."""
    return json.dumps(str(value))


def _json_value(f: Any, value: Any) -> str:
    """A column's value as JSON for `json_to_recordset`, as the model field would store it: a
    JSON field's value through its encoder (null: SQL NULL), any other prepared by its field."""
    if isinstance(f, JSONField):
        return "null" if value is None else json.dumps(value, cls=f.encoder)
    return jsonenc.dumps(f.get_db_prep_save(value, connection))


def lease_is_live(effect: Effect) -> bool:
    """Is the effect's lease still running, by the database clock?"""
    return Effect.objects.filter(
        pk=effect.pk, status=Status.DISPATCHING, lease_expires_at__gt=Now()
    ).exists()


def claim(
    effect: Effect, *, owner: str, claim_id: str | None, lease_seconds: int, actor: str
) -> tuple[Effect, bool]:
    """`planned → dispatching` with a fresh lease. Returns (effect, repeated): a repeat with the
    same `claim_id` while its lease is live gets the same token and attempt back, unless a halt
    now covers the effect (the client must not start sending after a halt)."""
    if (
        effect.status == Status.DISPATCHING
        and claim_id
        and effect.claim_id == claim_id
        and lease_is_live(effect)
    ):
        halt = active_halt_for(effect)
        if halt is not None:
            raise halt_refusal(halt)
        return effect, True
    _check_claimable(effect)
    moved: Effect | None = None
    waiting: list[dict[str, Any]] = []
    try:
        # A savepoint when nested (an intent posted with its claim): a trigger's refusal then
        # leaves the caller's transaction usable for the limit's alert.
        with transaction.atomic():
            # First: it takes the halts' lock shared, which holds any halt back until we commit.
            halted = claim_refusal(effect)
            if halted is None:
                waiting = blocked_by(effect.id, lock=True)
                if not waiting:
                    # The claim trigger counts it against the limits (`ledger/sql/limits.sql`).
                    moved = _claim(effect, owner, claim_id, lease_seconds, actor)
    except DatabaseError as exc:
        refused = trigger_refusal(exc)
        if refused is None:
            raise
        raise refused from None
    if halted is not None:
        raise halted
    if waiting:
        raise Blocked("Upstream effects are not confirmed yet.", blocked_by=waiting)
    if moved is None:
        if ReviewItem.objects.filter(
            effect_id=effect.id, resolved_at__isnull=True, reason=Reason.DUPLICATE
        ).exists():
            raise InvalidTransition(
                "The provider may already hold this effect (a duplicate is under review): it "
                "cannot be claimed until an operator has decided.",
                status=effect.status,
            )
        raise InvalidTransition("The effect was claimed or changed by someone else first.")
    return moved, False


def _check_claimable(effect: Effect) -> None:
    """What refuses a claim before anything is locked: four-eyes (409 approval_required while
    it waits), a status other than planned, and spent attempts."""
    refuse_claim(effect)
    if effect.status != Status.PLANNED:
        raise InvalidTransition(
            f"Only a planned effect can be claimed; this one is {effect.status}.",
            status=effect.status,
        )
    if effect.attempt >= effect.max_attempts:
        raise AttemptsExhausted(
            f"All {effect.max_attempts} attempts have been used.",
            attempt=effect.attempt,
            max_attempts=effect.max_attempts,
        )


def trigger_refusal(exc: DatabaseError) -> LedgerError | None:
    """The answer for a claim the database refused by trigger: 409 `halted` (migration 0008)
    or 429 `limit_exceeded` (0014); None for any other error. Raised, not alerted: the caller
    enqueues the limit's alert once its transaction is over (`LimitExceeded.alert`)."""
    return limit_refusal(exc) or halt_refusal_from_trigger(exc)


_NO_OPEN_DUPLICATE = (
    f"NOT EXISTS (SELECT 1 FROM {ReviewItem._meta.db_table} r "
    f"WHERE r.effect_id = {_EFFECT_TABLE}.id AND r.resolved_at IS NULL "
    f"AND r.reason = '{Reason.DUPLICATE.value}')"
)


def _claim(
    effect: Effect, owner: str, claim_id: str | None, lease_seconds: int, actor: str
) -> Effect | None:
    token = secrets.token_urlsafe(24)
    try:
        return transition(
            effect,
            Status.DISPATCHING,
            actor=actor,
            reason="claimed",
            changes={
                "attempt": SqlExpr("attempt + 1"),
                "lease_owner": owner,
                "lease_token": token,
                "claim_id": claim_id,
                "lease_seconds": lease_seconds,
                "lease_expires_at": seconds_from_now(lease_seconds),
            },
            # The provider may already hold it more than once: a person decides first.
            where=[("attempt < max_attempts", []), (_NO_OPEN_DUPLICATE, [])],
            data={
                "owner": owner,
                "claim_id": claim_id,
                "lease_seconds": lease_seconds,
                # Which token this claim issued: a late outcome is kept only from one of these.
                "lease": digests.lease_digest(token),
            },
        )
    except Superseded:
        return None


def heartbeat(effect: Effect, *, token: str, lease_seconds: int) -> Effect:
    """Extend a live lease. An expired lease cannot be revived: recovery may be deciding it."""
    stamp, stamp_params = keyuse.stamp()  # the caller's key, when due: no round trip of its own
    sql = (
        f"{stamp}UPDATE {_EFFECT_TABLE} SET lease_expires_at = now() + make_interval(secs => %s), "
        f"lease_seconds = %s, version = version + 1, updated_at = now() "
        f"WHERE id = %s AND status = '{Status.DISPATCHING.value}' AND lease_token = %s "
        f"AND lease_expires_at > now() RETURNING *"
    )
    extended = one_effect(sql, [*stamp_params, lease_seconds, lease_seconds, effect.id, token])
    if extended is None:
        raise StaleLease("The lease has expired or belongs to another claim.")
    return extended


def end_lease(effect: Effect, *, owner: str, actor: str) -> Effect:
    """End now the live lease `owner` holds on `effect`, as if it had run out: its holder is
    gone (a restarted process found its predecessor's claim). Only the lease changes; the
    effect stays `dispatching` until recovery moves it on, exactly as after an expiry, so that
    the lost claim's attempt comes back (`ledger/sql/lost_leases.sql`) and nothing is resent
    before the provider is asked. A lease of another owner, or one already over, is refused."""
    sql = (
        f"UPDATE {_EFFECT_TABLE} SET lease_expires_at = now(), version = version + 1, "
        f"updated_at = now() WHERE id = %s AND status = '{Status.DISPATCHING.value}' "
        f"AND lease_owner = %s AND lease_expires_at > now() RETURNING *"
    )
    with transaction.atomic():
        ended = one_effect(sql, [effect.id, owner])
        if ended is None:
            raise StaleLease(f"The effect holds no live lease of {owner!r} to end.")
        record_event(
            effect.id,
            kind=EventKind.LEASE_ENDED,
            actor=actor,
            from_status=Status.DISPATCHING.value,
            to_status=Status.DISPATCHING.value,
            reason="lease ended: its holder is gone",
            data={"owner": owner, "claim_id": ended.claim_id},
        )
    return ended
