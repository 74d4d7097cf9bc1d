"""The one writer of `Effect.status`.

Every transition is one transaction: a conditional `UPDATE … WHERE id = %s AND status = %s AND
version = %s RETURNING …` (no row back means someone else moved the effect first) plus one
appended `EffectEvent`. Lease and deadline arithmetic uses the database clock (`now()`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models.functions import Now

from ledger import digests, jsonenc, keyuse
from ledger.approvals import refuse_claim
from ledger.errors import (
    AttemptsExhausted,
    Blocked,
    InvalidTransition,
    LedgerError,
    StaleLease,
)
from ledger.halts import active_halt_for, claim_refusal
from ledger.halts import refusal as halt_refusal
from ledger.halts import refusal_from_trigger as halt_refusal_from_trigger
from ledger.interlocks import blocked_by, cancel_dependents
from ledger.limits import NON_RECEIPT, release
from ledger.limits import refusal_from_trigger as limit_refusal
from ledger.metrics import count_transition
from ledger.models import Effect, EffectEvent, EventKind, Reason
from ledger.reviewqueue import open_review
from ledger.states import UPSTREAM_DEAD, Kind, Status, is_allowed

# Statuses that end the effect's own story (compensation aside): `resolved_at` is set on entry.
_RESOLVING = frozenset({Status.CONFIRMED, Status.FAILED, Status.CANCELLED, Status.COMPENSATED})
# A compensation that ended so leaves its parent confirmed, and a person must look at it.
_COMPENSATION_TROUBLE = {
    Status.FAILED: Reason.COMPENSATION_FAILED,
    Status.UNKNOWN: Reason.COMPENSATION_UNKNOWN,
}
_EFFECT_TABLE = Effect._meta.db_table
_EVENT_TABLE = EffectEvent._meta.db_table
_FIELD_BY_COLUMN = {f.column: f for f in Effect._meta.concrete_fields}
# An event's columns after effect_id, as `event_values` gives them.
EVENT_COLUMNS = "kind, actor, from_status, to_status, reason, data, digest"


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


def record_event(
    effect_id: Any,
    *,
    kind: str,
    actor: str,
    from_status: str = "",
    to_status: str = "",
    reason: str = "",
    data: Mapping[str, Any] | None = None,
) -> None:
    values = event_values(
        kind=kind,
        actor=actor,
        from_status=from_status,
        to_status=to_status,
        reason=reason,
        data=data,
    )
    # A plain INSERT: the ORM's create() costs more than the round trip. It also carries the
    # caller's key stamp when one is due.
    stamp, stamp_params = keyuse.stamp()
    with connection.cursor() as cursor:
        cursor.execute(
            f"{stamp}INSERT INTO {_EVENT_TABLE} (effect_id, {EVENT_COLUMNS}, created_at) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, now())",
            [*stamp_params, effect_id, *values],
        )


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


def event_values(
    *,
    kind: str,
    actor: str,
    from_status: str = "",
    to_status: str = "",
    reason: str = "",
    data: Mapping[str, Any] | None = None,
) -> list[Any]:
    """An event's column values after `effect_id`, in `EVENT_COLUMNS` order (the digest is of
    its data)."""
    data = dict(data or {})
    return [
        kind,
        actor[:200],
        from_status,
        to_status,
        reason[:2000],
        jsonenc.dumps(data),
        digests.content_digest(data),
    ]


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
    if superseded or moved is None:
        raise Superseded(effect.id)
    return moved


def _follow_on(effect: Effect, *, actor: str) -> None:
    """What a transition implies for other effects, inside the same transaction."""
    if effect.status in UPSTREAM_DEAD:
        cancel_dependents(effect.id)
    if effect.kind == Kind.COMPENSATION and effect.parent_id:
        parent = Effect.objects.get(pk=effect.parent_id)
        if effect.status == Status.CONFIRMED and parent.status == Status.CONFIRMED:
            transition(
                parent,
                Status.COMPENSATED,
                actor=actor,
                reason="compensation_confirmed",
                data={"compensation": str(effect.id)},
            )
        elif effect.status in _COMPENSATION_TROUBLE:
            open_review(parent.id, _COMPENSATION_TROUBLE[effect.status])


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
    refuse_claim(effect)  # four-eyes: 409 approval_required while it waits
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
                    # The claim trigger counts it against the limits (migration 0014).
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
        raise InvalidTransition("The effect was claimed or changed by someone else first.")
    return moved, False


def trigger_refusal(exc: DatabaseError) -> LedgerError | None:
    """The answer for a claim the database refused by trigger: 409 `halted` (migration 0008)
    or 429 `limit_exceeded` (0014); None for any other error. Raised, not alerted: the caller
    enqueues the limit's alert once its transaction is over (`LimitExceeded.alert`)."""
    return limit_refusal(exc) or halt_refusal_from_trigger(exc)


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
            where=[("attempt < max_attempts", [])],
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
