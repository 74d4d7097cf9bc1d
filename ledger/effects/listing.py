"""An agent's own effects, a page at a time: filtered, in the order they were recorded
(`GET /effects`), and one run's journal in `seq` order, for replay (`GET /runs/{id}/journal`).
Pages are by keyset, from just after a position the caller had (its cursor, which the API
writes and reads: `ledger.api.cursors`); one row past the page is read to know whether another
follows."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

from ledger.models import Agent, Effect


@dataclass(frozen=True)
class Page:
    effects: list[Effect]
    more: bool  # another page follows the last of `effects`


def _page(effects: QuerySet[Effect], limit: int) -> Page:
    read = list(effects[: limit + 1])
    return Page(read[:limit], len(read) > limit)


def effects_of(
    agent: Agent,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None = None,
    run_id: str | None = None,
    step_id: str | None = None,
    status: str | None = None,
    tool: str | None = None,
    owner: str | None = None,
) -> Page:
    """The agent's effects that match every filter given (`owner` is the lease's), oldest
    first, from just after `after` (created_at, id)."""
    effects = Effect.objects.filter(agent=agent)
    if run_id is not None:
        effects = effects.filter(run_id=run_id)
    if step_id is not None:
        effects = effects.filter(step_id=step_id)
    if status is not None:
        effects = effects.filter(status=status)
    if tool is not None:
        effects = effects.filter(tool=tool)
    if owner is not None:
        effects = effects.filter(lease_owner=owner)
    if after is not None:
        effects = effects.filter(
            Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1])
        )
    return _page(effects.order_by("created_at", "id"), limit)


def journal_of(agent: Agent, run_id: str, *, limit: int, after: int | None = None) -> Page:
    """The run's effects in `seq` order, from just after seq `after`."""
    effects = Effect.objects.filter(agent=agent, run_id=run_id)
    if after is not None:
        effects = effects.filter(seq__gt=after)
    return _page(effects.order_by("seq"), limit)
