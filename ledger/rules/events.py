"""Appending to an effect's history: every event row is written by `record_event`, or by a
set-based statement (`ledger.effects.transitions.transition_many`) from `event_values`' columns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import connection

from ledger import jsonenc
from ledger.models import EffectEvent
from ledger.observability.tracing import current_trace_id
from ledger.policy import digests, keyuse

_EVENT_TABLE = EffectEvent._meta.db_table
# An event's columns after effect_id, as `event_values` gives them.
EVENT_COLUMNS = "kind, actor, from_status, to_status, reason, data, digest"


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
    its data). An event written while serving a traced agent call keeps the call's trace id
    (`ledger.observability.tracing`)."""
    data = dict(data or {})
    trace_id = current_trace_id()
    if trace_id is not None:
        data.setdefault("trace_id", trace_id)
    return [
        kind,
        actor[:200],
        from_status,
        to_status,
        reason[:2000],
        jsonenc.dumps(data),
        digests.content_digest(data),
    ]


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
