"""Interlocks: a downstream effect waits until every upstream effect is confirmed for good.

The one rule, written once as SQL (`blocking`): an upstream holds its dependents back while it
is not `confirmed`, or while a compensation of it is in flight (it may be about to become
`compensated`, and its dependents then cancelled). The claim, `/recovery`, the effect as the API
shows it and the operators' overview all ask through this module, so they cannot disagree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from ledger.models import Effect, EffectDependency, EffectEvent
from ledger.models.states import INCOMPLETE, Kind, Status, sql_list

_EFFECTS = Effect._meta.db_table
_DEPENDENCIES = EffectDependency._meta.db_table
_EVENTS = EffectEvent._meta.db_table


def compensating(upstream: str) -> str:
    """SQL: a compensation of the effect aliased `upstream` is still in flight."""
    return (
        f"EXISTS (SELECT 1 FROM {_EFFECTS} c WHERE c.parent_id = {upstream}.id "
        f"AND c.kind = '{Kind.COMPENSATION.value}' AND c.status IN ({sql_list(INCOMPLETE)}))"
    )


def blocking(upstream: str) -> str:
    """SQL: the effect aliased `upstream` holds back the effects that depend on it."""
    return f"({upstream}.status <> '{Status.CONFIRMED.value}' OR {compensating(upstream)})"


@dataclass(frozen=True)
class Upstream:
    id: str
    status: str
    blocking: bool
    compensating: bool

    def shown(self) -> dict[str, Any]:
        """As the API shows an upstream that holds an effect back (`blocked_by`)."""
        shown: dict[str, Any] = {"id": self.id, "status": self.status}
        if self.compensating:
            shown["compensating"] = True
        return shown


def upstreams_of(effect_ids: Iterable[Any], *, lock: bool = False) -> dict[str, list[Upstream]]:
    """Each effect's upstream effects, for many effects in one query.

    With `lock`, the upstream rows are read `FOR SHARE`: a concurrent transition of an upstream
    (confirmed → compensated), or a compensation being recorded for it (which locks it `FOR
    UPDATE`), waits for the caller's transaction, or the caller sees its result.
    """
    ids = [str(i) for i in effect_ids]
    found: dict[str, list[Upstream]] = defaultdict(list)
    if not ids:
        return found
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT d.downstream_id, u.id, u.status, {blocking('u')}, {compensating('u')} "
            f"FROM {_DEPENDENCIES} d JOIN {_EFFECTS} u ON u.id = d.upstream_id "
            f"WHERE d.downstream_id = ANY(%s::uuid[]) "
            # Locks are taken in one order (by id) so that two claims cannot deadlock; shown,
            # upstreams keep the order the agent named them in.
            + ("ORDER BY u.id FOR SHARE OF u" if lock else "ORDER BY d.id"),
            [ids],
        )
        for downstream, uid, status, holds, comp in cursor.fetchall():
            found[str(downstream)].append(Upstream(str(uid), status, holds, comp))
    return found


def blocked_by(effect_id: Any, *, lock: bool = False) -> list[dict[str, Any]]:
    """The upstream effects that hold this one back, as the API shows them."""
    return [u.shown() for u in upstreams_of([effect_id], lock=lock)[str(effect_id)] if u.blocking]


def blocked_among(effect_ids: list[Any]) -> set[str]:
    """Which of these effects are held back by an upstream effect."""
    return {
        downstream
        for downstream, upstream in upstreams_of(effect_ids).items()
        if any(u.blocking for u in upstream)
    }


def blocked_branches(limit: int) -> tuple[int, list[dict[str, Any]]]:
    """Planned effects held back, oldest first, with the upstream that holds each: (how many in
    all, the first `limit`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT d.id, d.effect_key, d.tool, u.id, u.effect_key, u.status,
                   {compensating("u")}, count(*) OVER ()
              FROM {_DEPENDENCIES} x
              JOIN {_EFFECTS} d ON d.id = x.downstream_id AND d.status = '{Status.PLANNED.value}'
              JOIN {_EFFECTS} u ON u.id = x.upstream_id AND {blocking("u")}
             ORDER BY d.created_at, d.id LIMIT %s
            """,
            [limit],
        )
        rows = cursor.fetchall()
    total = rows[0][7] if rows else 0
    keys = (
        "id",
        "effect_key",
        "tool",
        "upstream_id",
        "upstream_key",
        "upstream_status",
        "compensating",
    )
    return total, [dict(zip(keys, row[:7], strict=True)) for row in rows]
