"""What an agent does after the fact: read a run's journal to replay it, compensate a
confirmed effect, ask what to do with its incomplete effects after a restart."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Path, Query, Router
from ninja.responses import Status as Reply

from ledger.api.auth import agent_of
from ledger.api.cursors import journal_cursor, journal_position, recovery_position
from ledger.api.queries import JournalQuery
from ledger.api.schemas import ERRORS, CompensateIn, EffectOut, EffectPage, RecoveryIn, RecoveryOut
from ledger.api.serialize import answer_dict, page_dict, recovery_dict
from ledger.effects import listing
from ledger.effects.agentcalls import compensate_own
from ledger.effects.recovery import recover

router = Router()


@router.get(
    "/runs/{run_id}/journal",
    response={200: EffectPage, **ERRORS},
    summary="A run's effects in seq order, with recorded outcomes, for replay",
    operation_id="getRunJournal",
    tags=["runs"],
)
def run_journal(
    request: HttpRequest, query: Query[JournalQuery], run_id: str = Path(..., max_length=200)
) -> dict[str, Any]:
    agent = agent_of(request)
    after = journal_position(query.cursor) if query.cursor else None
    page = listing.journal_of(agent, run_id, limit=query.limit, after=after)
    return page_dict(page, agent.name, lambda last: journal_cursor(last.seq))


@router.post(
    "/effects/{effect_id}/compensate",
    response={201: EffectOut, 200: EffectOut, **ERRORS},
    summary="Record a compensation for a confirmed effect",
    operation_id="compensateEffect",
    tags=["effects"],
)
def compensate_effect(request: HttpRequest, effect_id: uuid.UUID, payload: CompensateIn) -> Reply:
    agent = agent_of(request)
    compensation = compensate_own(
        agent,
        effect_id,
        tool=payload.tool,
        request=payload.request,
        reason=payload.reason,
        compensation_key=payload.compensation_key,
    )
    return Reply(201 if compensation.created else 200, answer_dict(compensation, agent.name))


@router.post(
    "/recovery",
    response={200: RecoveryOut, **ERRORS},
    summary="What to do after a restart",
    operation_id="recover",
    tags=["recovery"],
)
def post_recovery(request: HttpRequest, payload: RecoveryIn) -> dict[str, Any]:
    agent = agent_of(request)
    page = recover(
        agent,
        owner=payload.owner,
        run_id=payload.run_id,
        dry_run=payload.dry_run,
        limit=min(payload.limit, settings.LEDGER_RECOVERY_LIMIT),
        after=recovery_position(payload.cursor) if payload.cursor else None,
    )
    return recovery_dict(page, agent.name)
