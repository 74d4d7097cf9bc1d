"""The agent REST API (docs/api.md). Thin views: authenticate, validate, call one ledger
function."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from django.conf import settings
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    InternalError,
    OperationalError,
    transaction,
)
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from ninja import Path, Query, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.responses import Status as Reply
from ninja.security import HttpBearer

from ledger import jsonenc
from ledger.api import webhooks
from ledger.api.contract import LedgerAPI, check_media_type, check_object
from ledger.api.cursors import (
    journal_cursor,
    journal_position,
    list_cursor,
    list_position,
    recovery_cursor,
    recovery_position,
)
from ledger.api.inputs import check_json, intent_of
from ledger.api.longpoll import RETRY_AFTER_SECONDS, wait_for_change
from ledger.api.middleware import unavailable
from ledger.api.queries import JournalQuery, ListFilters, WaitQuery
from ledger.api.schemas import (
    CancelIn,
    ClaimedEffectOut,
    ClaimIn,
    CompensateIn,
    EffectOut,
    EffectPage,
    ErrorOut,
    HealthOut,
    HeartbeatIn,
    HeartbeatOut,
    IntentIn,
    OutcomeIn,
    RecoveryIn,
    RecoveryOut,
    WebhookIn,
)
from ledger.api.serialize import effect_dict, effect_dicts
from ledger.audit.redaction import scrub_cards
from ledger.containment.halts import active_halt_for
from ledger.containment.halts import shown as shown_halt
from ledger.containment.limits import LimitExceeded
from ledger.effects.compensation import compensate
from ledger.effects.hotpath import read_effect, record_new_intent, record_simple_outcome
from ledger.effects.intents import Intent, check_agent_key, first_status, record_intent
from ledger.effects.interlocks import upstreams_of
from ledger.effects.outcomes import record_outcome
from ledger.effects.recovery import recover
from ledger.effects.states import Status
from ledger.effects.transitions import claim, heartbeat, one_effect, transition, trigger_refusal
from ledger.errors import LedgerError, NotFound, OperatorDecided
from ledger.models import Agent, Effect, RequestedBy
from ledger.observability import logcontext
from ledger.observability.readiness import database_ok, redis_ok
from ledger.policy.agentkeys import agent_for_key
from ledger.policy.tools import Policy, policy_for
from ledger.restore import mode as restore

# Pinned: log pipelines filter on the name this module had before the ledger's subpackages.
log = logging.getLogger("ledger.api")


class ExactParser(Parser):
    """Bodies keep exact decimals; malformed JSON and unstorable strings are refused up front."""

    def parse_body(self, request: HttpRequest) -> Any:
        check_media_type(request)
        data = jsonenc.loads(request.body)
        check_object(data)
        check_json(data)
        return data


class ExactRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> str:
        return jsonenc.dumps(data)


class AgentKey(HttpBearer):
    openapi_description = "An agent key: `Authorization: Bearer elk_…`"

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        agent = agent_for_key(token)
        if agent is not None:
            request.agent = agent  # type: ignore[attr-defined]
            logcontext.bind(agent=agent.name)
        return agent


api = LedgerAPI(
    title="Effect Ledger agent API",
    version="1",
    description=(
        "Record intent before dispatch; claim, report, recover. The reference, with every "
        "error code and an example of each call, is docs/api.md in the source repository "
        "(`make docs` builds it into the documentation site as api.html)."
    ),
    urls_namespace="api-v1",
    auth=AgentKey(),
    parser=ExactParser(),
    renderer=ExactRenderer(),
)

ERRORS: dict[int, type[Schema]] = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    415: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
    503: ErrorOut,
}


def error_response(
    request: HttpRequest, status: int, code: str, detail: str, **extra: Any
) -> HttpResponse:
    return api.create_response(request, {"error": code, "detail": detail, **extra}, status=status)


@api.exception_handler(LedgerError)
def _ledger_error(request: HttpRequest, exc: LedgerError) -> HttpResponse:
    response = api.create_response(request, exc.body(), status=exc.status)
    for header, value in exc.headers().items():
        response[header] = value
    return response


@api.exception_handler(LimitExceeded)
def _limit_exceeded(request: HttpRequest, exc: LimitExceeded) -> HttpResponse:
    # The transaction that refused may have rolled back with its alert (an intent posted with
    # its claim): enqueue it again, on its own; a no-op when it exists.
    exc.alert()
    return _ledger_error(request, exc)


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(
        request, 401, "unauthorized", "A valid agent key is required (Authorization: Bearer …)."
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, jsonenc.MalformedJSON):
        return error_response(
            request, 400, "malformed_json", f"The body is not valid JSON: {cause}"
        )
    if isinstance(cause, LedgerError):
        return _ledger_error(request, cause)
    code = {400: "malformed_json", 401: "unauthorized", 403: "forbidden", 404: "not_found"}
    return error_response(request, exc.status_code, code.get(exc.status_code, "error"), str(exc))


def _field_name(loc: list[Any]) -> str:
    # pydantic names union branches in the location ("constrained-str", "dict[str,any]").
    parts = [str(p) for p in loc if not re.search(r"[\[\]-]", str(p))]
    if parts and parts[0] == "body":
        # ("body", "payload", "run_id"): the second part names the view argument.
        parts = parts[2:]
    elif parts and parts[0] in ("query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    fields: dict[str, str] = {}
    for error in exc.errors:
        # An unknown field is named as the body spelled it: cut, and card-free, like any echo.
        name = scrub_cards(_field_name(list(error.get("loc", [])))[:120])
        fields.setdefault(name, str(error.get("msg", "invalid")))
    return error_response(
        request, 422, "validation_error", "The request is not valid.", fields=fields
    )


@api.exception_handler(InternalError)
def _trigger_refusal(request: HttpRequest, exc: InternalError) -> HttpResponse:
    if "pgtrigger" not in str(exc):
        raise exc
    # The database backs up the transition table; reaching it means the Python side let a
    # forbidden write through. Refuse the request, and say loudly that this is a bug.
    log.error("BUG: the database refused a write the ledger attempted: %s", exc)
    return error_response(
        request, 409, "invalid_transition", "The database refused this state change."
    )


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _unavailable(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    return unavailable(exc)


def _agent(request: HttpRequest) -> Agent:
    return request.agent  # type: ignore[attr-defined]


def _actor(agent: Agent) -> str:
    return f"agent:{agent.name}"


def _own_effect(request: HttpRequest, effect_id: uuid.UUID) -> Effect:
    """The caller's effect; another agent's effect is 404, so its existence does not leak."""
    # Raw: this runs on every call about one effect, and building the ORM query costs more
    # than the indexed primary-key read.
    effect = one_effect(
        f"SELECT * FROM {Effect._meta.db_table} WHERE id = %s AND agent_id = %s",
        [effect_id, _agent(request).id],
    )
    if effect is None:
        raise NotFound("No such effect.")
    logcontext.bind(run_id=effect.run_id)
    return effect


def _agents_to_act_on(effect: Any) -> None:
    """Refuse an agent's claim, outcome or cancel of an effect an operator decided (a refund,
    also while it awaits a second operator): it is recorded under the agent whose effect it
    undoes, but only the ledger's executor or an operator carries it out."""
    if effect.requested_by == RequestedBy.OPERATOR:
        raise OperatorDecided(
            "An operator decided this effect: the ledger or an operator carries it out, and "
            "its agent may read it but not claim, report on or cancel it."
        )


def _show(request: HttpRequest, effect: Effect, *, claimer: bool = False) -> dict[str, Any]:
    upstream = upstreams_of([effect.id]).get(str(effect.id), [])
    return effect_dict(effect, _agent(request).name, upstream, claimer=claimer)


@api.post(
    "/effects",
    response={201: ClaimedEffectOut, 200: ClaimedEffectOut, 202: ClaimedEffectOut, **ERRORS},
    summary="Record intent before dispatch (optionally claiming it)",
    operation_id="recordEffect",
    tags=["effects"],
)
def post_effect(request: HttpRequest, payload: IntentIn) -> Reply:
    agent = _agent(request)
    policy = policy_for(payload.tool)
    intent = intent_of(payload, policy)
    check_agent_key(intent)
    logcontext.bind(run_id=intent.run_id)
    simple = not intent.depends_on and not intent.callback_url
    if simple and first_status(agent, intent, policy) == Status.PLANNED:
        # The success path: one statement (ledger.effects.hotpath); None for a key recorded already.
        # A callback is posted by the trigger on a status change, which an effect inserted
        # already claimed is not: an intent with a callback_url takes the general path.
        row = _new_intent(agent, intent, policy, payload)
        if row is not None:
            logcontext.bind(effect_id=row.id)
            return Reply(201, effect_dict(row, agent.name, [], claimer=payload.claim))
    claimed = False
    # Intent and claim are one transaction: a refused claim records nothing.
    with transaction.atomic():
        effect, created = record_intent(agent, intent, policy, actor=_actor(agent))
        logcontext.bind(effect_id=effect.id)
        # A new effect is planned, or awaiting_approval (four-eyes), which nobody may claim yet.
        if payload.claim and effect.status in (Status.PLANNED, Status.DISPATCHING):
            effect, _ = claim(
                effect,
                owner=payload.owner,
                claim_id=payload.claim_id,
                lease_seconds=policy.lease_for(payload.lease_seconds),
                actor=_actor(agent),
            )
            claimed = True
    if payload.claim and effect.status == Status.AWAITING_APPROVAL:
        # Four-eyes: recorded, not claimed; the client waits for an operator's decision.
        return Reply(202, _show(request, effect))
    return Reply(201 if created else 200, _show(request, effect, claimer=claimed))


def _new_intent(agent: Agent, intent: Intent, policy: Policy, payload: IntentIn) -> Any:
    claim = None
    if payload.claim:
        lease_seconds = policy.lease_for(payload.lease_seconds)
        claim = {
            "owner": payload.owner,
            "claim_id": payload.claim_id,
            "lease_seconds": lease_seconds,
        }
    try:
        return record_new_intent(agent, intent, policy, actor=_actor(agent), claim=claim)
    except IntegrityError:
        return None  # the same key recorded concurrently: the general path sorts it out
    except DatabaseError as exc:
        refused = trigger_refusal(exc)
        if refused is None:
            raise
        raise refused from None


@api.post(
    "/effects/{effect_id}/claim",
    response={200: ClaimedEffectOut, **ERRORS},
    summary="Claim a planned effect: planned → dispatching, with a lease",
    operation_id="claimEffect",
    tags=["effects"],
)
def claim_effect(request: HttpRequest, effect_id: uuid.UUID, payload: ClaimIn) -> dict[str, Any]:
    effect = _own_effect(request, effect_id)
    _agents_to_act_on(effect)
    effect, _ = claim(
        effect,
        owner=payload.owner,
        claim_id=payload.claim_id,
        lease_seconds=policy_for(effect.tool).lease_for(payload.lease_seconds),
        actor=_actor(_agent(request)),
    )
    return _show(request, effect, claimer=True)


@api.post(
    "/effects/{effect_id}/heartbeat",
    response={200: HeartbeatOut, **ERRORS},
    summary="Extend a live lease; `halt` says whether a halt now covers the effect",
    operation_id="heartbeatEffect",
    tags=["effects"],
)
def heartbeat_effect(
    request: HttpRequest, effect_id: uuid.UUID, payload: HeartbeatIn
) -> dict[str, Any]:
    effect = _own_effect(request, effect_id)
    effect = heartbeat(
        effect,
        token=payload.lease_token,
        # Never shorter than the tool's call_timeout, as a claim's (a call in flight must be
        # able to finish inside the lease it runs on).
        lease_seconds=policy_for(effect.tool).lease_for(payload.lease_seconds),
    )
    # Still accepted while halted (the work in flight must be able to report back), but the
    # answer tells the client, which can then stop before sending anything more.
    halt = active_halt_for(effect)
    return {**_show(request, effect, claimer=True), "halt": shown_halt(halt) if halt else None}


@api.post(
    "/effects/{effect_id}/outcome",
    response={200: EffectOut, **ERRORS},
    summary="Report what the provider did",
    operation_id="reportOutcome",
    tags=["effects"],
)
def outcome_effect(
    request: HttpRequest, effect_id: uuid.UUID, payload: OutcomeIn
) -> dict[str, Any]:
    agent = _agent(request)
    row = read_effect(effect_id, agent.id)
    if row is None:
        raise NotFound("No such effect.")
    logcontext.bind(run_id=row.run_id)
    _agents_to_act_on(row)
    report = {
        "token": payload.lease_token,
        "status": payload.status,
        "provider_ref": payload.provider_ref,
        "response": payload.response,
        "error": payload.error,
        "actor": _actor(agent),
        "policy": policy_for(row.tool),
    }
    # The success path: one fenced statement (ledger.effects.hotpath); None for everything else.
    simple = record_simple_outcome(row, **report)
    if simple is not None:
        upstream = upstreams_of([simple.id]).get(str(simple.id), []) if simple.has_upstream else []
        return effect_dict(simple, agent.name, upstream)
    effect = _own_effect(request, effect_id)
    moved, _ = record_outcome(effect, **report)
    return _show(request, moved)


@api.post(
    "/effects/{effect_id}/cancel",
    response={200: EffectOut, **ERRORS},
    summary="Cancel a planned effect",
    operation_id="cancelEffect",
    tags=["effects"],
)
def cancel_effect(request: HttpRequest, effect_id: uuid.UUID, payload: CancelIn) -> dict[str, Any]:
    effect = _own_effect(request, effect_id)
    _agents_to_act_on(effect)
    if effect.status == Status.CANCELLED:
        return _show(request, effect)
    reason = scrub_cards(payload.reason) or "cancelled by agent"
    moved = transition(
        effect,
        Status.CANCELLED,
        actor=_actor(_agent(request)),
        reason=reason,
        data={"reason": reason},
    )
    return _show(request, moved)


@api.get(
    "/effects/{effect_id}",
    response={200: EffectOut, **ERRORS},
    summary="One effect",
    operation_id="getEffect",
    tags=["effects"],
)
def get_effect(
    request: HttpRequest, effect_id: uuid.UUID, query: Query[WaitQuery], response: HttpResponse
) -> dict[str, Any]:
    if query.wait is None:
        return _show(request, _own_effect(request, effect_id))
    effect = wait_for_change(
        effect_id,
        query.wait,
        lambda: _own_effect(request, effect_id),
        owner=str(_agent(request).id),
    )
    if effect is None:
        # Every place to wait is taken: the effect as it is now, and when to ask again.
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        effect = _own_effect(request, effect_id)
    return _show(request, effect)


@api.get(
    "/effects",
    response={200: EffectPage, **ERRORS},
    summary="List the caller's effects",
    operation_id="listEffects",
    tags=["effects"],
)
def list_effects(request: HttpRequest, filters: Query[ListFilters]) -> dict[str, Any]:
    agent = _agent(request)
    effects = Effect.objects.filter(agent=agent)
    if filters.run_id is not None:
        effects = effects.filter(run_id=filters.run_id)
    if filters.step_id is not None:
        effects = effects.filter(step_id=filters.step_id)
    if filters.status is not None:
        effects = effects.filter(status=filters.status)
    if filters.tool is not None:
        effects = effects.filter(tool=filters.tool)
    if filters.owner is not None:
        effects = effects.filter(lease_owner=filters.owner)
    if filters.cursor:
        after = list_position(filters.cursor)
        effects = effects.filter(
            Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1])
        )
    page = list(effects.order_by("created_at", "id")[: filters.limit + 1])
    more = len(page) > filters.limit
    page = page[: filters.limit]
    return {
        "items": effect_dicts(page, agent.name),
        "next_cursor": list_cursor(page[-1].created_at, page[-1].id) if more else None,
    }


@api.get(
    "/runs/{run_id}/journal",
    response={200: EffectPage, **ERRORS},
    summary="A run's effects in seq order, with recorded outcomes, for replay",
    operation_id="getRunJournal",
    tags=["runs"],
)
def run_journal(
    request: HttpRequest, query: Query[JournalQuery], run_id: str = Path(..., max_length=200)
) -> dict[str, Any]:
    agent = _agent(request)
    effects = Effect.objects.filter(agent=agent, run_id=run_id)
    if query.cursor:
        effects = effects.filter(seq__gt=journal_position(query.cursor))
    page = list(effects.order_by("seq")[: query.limit + 1])
    more = len(page) > query.limit
    page = page[: query.limit]
    return {
        "items": effect_dicts(page, agent.name),
        "next_cursor": journal_cursor(page[-1].seq) if more else None,
    }


@api.post(
    "/effects/{effect_id}/compensate",
    response={201: EffectOut, 200: EffectOut, **ERRORS},
    summary="Record a compensation for a confirmed effect",
    operation_id="compensateEffect",
    tags=["effects"],
)
def compensate_effect(request: HttpRequest, effect_id: uuid.UUID, payload: CompensateIn) -> Reply:
    agent = _agent(request)
    effect, created = compensate(
        agent,
        _own_effect(request, effect_id),
        tool=payload.tool,
        request=payload.request,
        reason=payload.reason,
        compensation_key=payload.compensation_key,
        actor=_actor(agent),
    )
    return Reply(201 if created else 200, _show(request, effect))


@api.post(
    "/recovery",
    response={200: RecoveryOut, **ERRORS},
    summary="What to do after a restart",
    operation_id="recover",
    tags=["recovery"],
)
def post_recovery(request: HttpRequest, payload: RecoveryIn) -> dict[str, Any]:
    agent = _agent(request)
    page = recover(
        agent,
        owner=payload.owner,
        run_id=payload.run_id,
        dry_run=payload.dry_run,
        limit=min(payload.limit, settings.LEDGER_RECOVERY_LIMIT),
        after=recovery_position(payload.cursor) if payload.cursor else None,
    )
    shown = effect_dicts([item.effect for item in page.plans], agent.name)
    return {
        "effects": [
            {"effect": data, "action": item.plan.action, "reason": item.plan.reason}
            for item, data in zip(page.plans, shown, strict=True)
        ],
        "counts_by_status": page.counts,
        "next_cursor": recovery_cursor(page.next),
    }


@api.post(
    "/webhooks/{provider}",
    auth=None,
    response={200: EffectOut, **ERRORS},
    summary="Signed provider callback, matched by idempotency key",
    operation_id="receiveProviderWebhook",
    tags=["webhooks"],
)
def provider_webhook(request: HttpRequest, provider: str, payload: WebhookIn) -> dict[str, Any]:
    signature = webhooks.verify(
        provider[:100], request.headers.get("X-Ledger-Signature", ""), request.body
    )
    effect = webhooks.deliver(provider[:100], signature, payload.model_dump())
    return effect_dict(effect, effect.agent.name, upstreams_of([effect.id]).get(str(effect.id), []))


@api.get(
    "/health",
    auth=None,
    response={200: HealthOut, 503: HealthOut},
    exclude_none=True,
    summary="Liveness and readiness",
    operation_id="getHealth",
    tags=["health"],
)
def health(request: HttpRequest) -> Reply:
    db, rd = database_ok(), redis_ok()
    status = 200 if db and rd else 503
    body: dict[str, Any] = {
        "status": "ok" if status == 200 else "unavailable",
        "database": "ok" if db else "unreachable",
        "redis": "ok" if rd else "unreachable",
    }
    if status != 200:
        body.update(error="unavailable", detail="A backing service is not reachable.")
    else:
        window = restore.current()
        body.update(restore_mode=window is not None)
        if window is not None:
            body.update(restore_lost_since=window.lost_since)
    return Reply(status, body)
