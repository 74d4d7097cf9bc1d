"""An effect's life through the agent API: record the intent (optionally claiming it), claim,
renew the lease, report the outcome, cancel; read one effect (optionally waiting for a change)
and list the caller's effects."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router
from ninja.responses import Status as Reply

from ledger.api.auth import agent_of
from ledger.api.cursors import list_cursor, list_position
from ledger.api.inputs import intent_of
from ledger.api.longpoll import RETRY_AFTER_SECONDS, own_effect_after_change
from ledger.api.queries import ListFilters, WaitQuery
from ledger.api.schemas import (
    ERRORS,
    CancelIn,
    ClaimedEffectOut,
    ClaimIn,
    EffectOut,
    EffectPage,
    EndLeaseIn,
    HeartbeatIn,
    HeartbeatOut,
    IntentIn,
    OutcomeIn,
)
from ledger.api.serialize import answer_dict, page_dict
from ledger.effects import agentcalls, listing
from ledger.effects.agentcalls import ClaimTerms
from ledger.effects.intake import take_intent
from ledger.policy.tools import policy_for
from ledger.rules.halts import shown as shown_halt

router = Router()


def _terms(payload: IntentIn | ClaimIn) -> ClaimTerms:
    return ClaimTerms(payload.owner, payload.claim_id, payload.lease_seconds)


@router.post(
    "/effects",
    response={201: ClaimedEffectOut, 200: ClaimedEffectOut, 202: ClaimedEffectOut, **ERRORS},
    summary="Record intent before dispatch (optionally claiming it)",
    operation_id="recordEffect",
    tags=["effects"],
)
def post_effect(request: HttpRequest, payload: IntentIn) -> Reply:
    agent, policy = agent_of(request), policy_for(payload.tool)
    claim = _terms(payload) if payload.claim else None
    taken = take_intent(agent, intent_of(payload, policy), policy, claim=claim)
    # Four-eyes: recorded, not claimed; the client waits for an operator's decision.
    status = 202 if taken.awaiting_approval else 201 if taken.created else 200
    return Reply(status, answer_dict(taken, agent.name))


@router.post(
    "/effects/{effect_id}/claim",
    response={200: ClaimedEffectOut, **ERRORS},
    summary="Claim a planned effect: planned → dispatching, with a lease",
    operation_id="claimEffect",
    tags=["effects"],
)
def claim_effect(request: HttpRequest, effect_id: uuid.UUID, payload: ClaimIn) -> dict[str, Any]:
    agent = agent_of(request)
    return answer_dict(agentcalls.claim_own(agent, effect_id, _terms(payload)), agent.name)


@router.post(
    "/effects/{effect_id}/heartbeat",
    response={200: HeartbeatOut, **ERRORS},
    summary="Extend a live lease; `halt` says whether a halt now covers the effect",
    operation_id="heartbeatEffect",
    tags=["effects"],
)
def heartbeat_effect(
    request: HttpRequest, effect_id: uuid.UUID, payload: HeartbeatIn
) -> dict[str, Any]:
    agent = agent_of(request)
    renewed = agentcalls.renew_lease(
        agent, effect_id, token=payload.lease_token, lease_seconds=payload.lease_seconds
    )
    halt = shown_halt(renewed.halt) if renewed.halt else None
    return {**answer_dict(renewed, agent.name), "halt": halt}


@router.post(
    "/effects/{effect_id}/end-lease",
    response={200: EffectOut, **ERRORS},
    summary="End the live lease of a process of yours that is gone; recovery takes it up",
    operation_id="endLease",
    tags=["effects"],
)
def end_lease(request: HttpRequest, effect_id: uuid.UUID, payload: EndLeaseIn) -> dict[str, Any]:
    agent = agent_of(request)
    return answer_dict(agentcalls.end_gone_lease(agent, effect_id, owner=payload.owner), agent.name)


@router.post(
    "/effects/{effect_id}/outcome",
    response={200: EffectOut, **ERRORS},
    summary="Report what the provider did",
    operation_id="reportOutcome",
    tags=["effects"],
)
def outcome_effect(
    request: HttpRequest, effect_id: uuid.UUID, payload: OutcomeIn
) -> dict[str, Any]:
    agent = agent_of(request)
    reported = agentcalls.report_outcome(
        agent,
        effect_id,
        token=payload.lease_token,
        status=payload.status,
        provider_ref=payload.provider_ref,
        response=payload.response,
        error=payload.error,
    )
    return answer_dict(reported, agent.name)


@router.post(
    "/effects/{effect_id}/cancel",
    response={200: EffectOut, **ERRORS},
    summary="Cancel a planned effect",
    operation_id="cancelEffect",
    tags=["effects"],
)
def cancel_effect(request: HttpRequest, effect_id: uuid.UUID, payload: CancelIn) -> dict[str, Any]:
    agent = agent_of(request)
    return answer_dict(agentcalls.cancel_own(agent, effect_id, payload.reason), agent.name)


@router.get(
    "/effects/{effect_id}",
    response={200: EffectOut, **ERRORS},
    summary="One effect",
    operation_id="getEffect",
    tags=["effects"],
)
def get_effect(
    request: HttpRequest, effect_id: uuid.UUID, query: Query[WaitQuery], response: HttpResponse
) -> dict[str, Any]:
    agent = agent_of(request)
    seen, busy = own_effect_after_change(agent, effect_id, query.wait)
    if busy:
        # Every place to wait is taken: the effect as it is now, and when to ask again.
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return answer_dict(seen, agent.name)


@router.get(
    "/effects",
    response={200: EffectPage, **ERRORS},
    summary="List the caller's effects",
    operation_id="listEffects",
    tags=["effects"],
)
def list_effects(request: HttpRequest, filters: Query[ListFilters]) -> dict[str, Any]:
    agent = agent_of(request)
    after = list_position(filters.cursor) if filters.cursor else None
    where = filters.model_dump(include={"run_id", "step_id", "status", "tool", "owner"})
    page = listing.effects_of(agent, limit=filters.limit, after=after, **where)
    return page_dict(page, agent.name, lambda last: list_cursor(last.created_at, last.id))
