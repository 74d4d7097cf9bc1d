"""Wire formats of the agent API (docs/api.md). Inputs forbid unknown fields."""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from django.conf import settings
from ninja import Schema
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    WithJsonSchema,
)

from ledger.api.cursors import RECOVERY_CURSOR
from ledger.api.notifications import allowed_callback_url
from ledger.models.states import Kind, Status
from ledger.policy.redaction import holds_issued_card, scrub_cards


def _no_card(value: str) -> str:
    """Identifiers are stored, shown and matched as given, so one holding a card number is
    refused rather than tokenized (a tokenized key would no longer be the caller's key)."""
    if holds_issued_card(value):
        raise ValueError("must not contain a card number")
    return value


Id = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_card)]
ToolName = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_no_card)]
# Worker labels chosen by agents are stored and shown; a card number in one is tokenized, the
# same way every time, so filtering by the label still matches.
Label = Annotated[str, Field(max_length=200), AfterValidator(scrub_cards)]
ClaimId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(scrub_cards)]
Reason = Annotated[str, Field(max_length=2000)]


def _whole_number(value: Any) -> Any:
    """30.0 is the integer 30 in JSON; "30" and true are not numbers at all."""
    whole = (
        isinstance(value, (Decimal, float))
        and math.isfinite(value)
        and value == value.to_integral_value()
        if isinstance(value, Decimal)
        else isinstance(value, float) and math.isfinite(value) and value.is_integer()
    )
    return int(value) if whole else value


def _within_max_lease(value: int) -> int:
    """The deployment's bound (`LEDGER_MAX_LEASE_SECONDS`), read per request: restore mode
    reaches back as far as the longest lease (`ledger.rules.restore_state.longest_lease`)."""
    bound = settings.LEDGER_MAX_LEASE_SECONDS
    if value > bound:
        raise ValueError(f"must be at most {bound} (LEDGER_MAX_LEASE_SECONDS)")
    return value


class _DeploymentMaxLease:
    """The served schema's `maximum` is the deployment's bound, read when it is generated."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        schema["maximum"] = settings.LEDGER_MAX_LEASE_SECONDS
        return schema


# Strict: "30" or true must not become a lease, "yes" must not become a claim. 3600 is the
# most any deployment allows; LEDGER_MAX_LEASE_SECONDS may set a lower one.
LeaseSeconds = Annotated[
    StrictInt,
    Field(ge=1, le=3600),
    BeforeValidator(_whole_number),
    AfterValidator(_within_max_lease),
    _DeploymentMaxLease(),
]
# Free JSON: an input's schema names the served document's `JsonObject` / `JsonValue`, which
# say what the ledger can store (ledger.api.contract, ledger.api.inputs.check_json).
JsonObject = Annotated[dict[str, Any], WithJsonSchema({"x-json": "object"}, mode="validation")]
JsonValue = Annotated[Any, WithJsonSchema({"x-json": "value"}, mode="validation")]


class Input(Schema):
    model_config = ConfigDict(extra="forbid")


class ProvenanceIn(Input):
    model: Annotated[str, Field(max_length=200)] | None = None
    prompt_hash: Annotated[str, Field(max_length=200)] | None = None
    tool_schema_version: Annotated[str, Field(max_length=100)] | None = None
    model_output: JsonValue = None
    policy: JsonValue = None


class IntentIn(Input):
    run_id: Id
    step_id: Id
    tool: ToolName
    target: Annotated[str, Field(min_length=1, max_length=500)]
    request: JsonObject
    effect_key: (
        Annotated[str, Field(min_length=1, max_length=400), AfterValidator(_no_card)] | None
    ) = None
    # The effect key becomes run_id:step_id:<keyed digest of tool and request>
    # (ledger.effects.businesskeys); a tool's business key still wins.
    key_includes_request: StrictBool = False
    depends_on: Annotated[list[uuid.UUID], Field(max_length=100)] = []
    provenance: ProvenanceIn | None = None
    claim: StrictBool = False
    owner: Label = ""
    claim_id: ClaimId | None = None
    lease_seconds: LeaseSeconds | None = None
    # Signed notification of each status change (ledger.api.notifications), allow-listed hosts only.
    callback_url: (
        Annotated[
            str,
            Field(min_length=1, max_length=2000),
            AfterValidator(_no_card),
            AfterValidator(allowed_callback_url),
        ]
        | None
    ) = None


class ClaimIn(Input):
    owner: Label = ""
    claim_id: ClaimId | None = None
    lease_seconds: LeaseSeconds | None = None


class HeartbeatIn(Input):
    lease_token: Annotated[str, Field(min_length=1, max_length=64)]
    lease_seconds: LeaseSeconds | None = None


class EndLeaseIn(Input):
    """Whose lease to end: the `lease_owner` the effect shows, a process of the caller's that
    is gone."""

    owner: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(scrub_cards)]


class OutcomeIn(Input):
    lease_token: Annotated[str, Field(min_length=1, max_length=64)]
    status: Literal["confirmed", "failed", "unknown", "awaiting_confirmation", "not_sent"]
    provider_ref: Annotated[str, Field(max_length=500)] = ""
    response: JsonValue = None
    error: Annotated[str, Field(max_length=10000)] | JsonObject | None = None


class CancelIn(Input):
    reason: Reason = ""


class CompensateIn(Input):
    tool: ToolName | None = None
    request: JsonObject = {}
    reason: Reason = ""
    compensation_key: (
        Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_no_card)] | None
    ) = None


# POST /recovery's page size: the default, and the most one page holds (LEDGER_RECOVERY_LIMIT
# may lower it).
RECOVERY_PAGE = 100
RECOVERY_PAGE_MAX = 1000


class RecoveryIn(Input):
    owner: Label | None = None
    run_id: Id | None = None
    dry_run: StrictBool = False
    limit: Annotated[
        StrictInt, Field(ge=1, le=RECOVERY_PAGE_MAX), BeforeValidator(_whole_number)
    ] = RECOVERY_PAGE
    # The `next_cursor` of the page before; a request without one starts at the most urgent.
    cursor: Annotated[str, Field(pattern=RECOVERY_CURSOR)] | None = None


class WebhookIn(Input):
    idempotency_key: Annotated[str, Field(min_length=1, max_length=64)]
    status: Literal["confirmed", "failed"]
    provider_ref: Annotated[str, Field(max_length=500)] = ""
    response: JsonValue = None


class UpstreamOut(Schema):
    id: uuid.UUID
    status: Status


class ProvenanceOut(Schema):
    model: str | None = None
    prompt_hash: str | None = None
    tool_schema_version: str | None = None
    model_output: Any = None
    policy: Any = None


class EffectOut(Schema):
    id: uuid.UUID
    effect_key: str
    run_id: str
    step_id: str
    seq: int
    agent: str
    tool: str
    target: str
    kind: Kind
    status: Status
    attempt: int
    max_attempts: int
    idempotency_key: str
    lease_owner: str
    lease_expires_at: datetime | None
    provider_ref: str
    request: JsonObject
    response: Any
    error: Any
    depends_on: list[uuid.UUID]
    blocked_by: list[UpstreamOut]
    parent_id: uuid.UUID | None
    requested_by: Literal["agent", "operator"] = Field(
        description="Who asked for the effect: `agent`, its agent; `operator`, an operator's "
        "decision (a compensation, a decision effect) or the ledger's own ruling. Agents may "
        "not cancel, claim or report on what an operator decided."
    )
    provenance: ProvenanceOut
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None


class ClaimedEffectOut(EffectOut):
    """The claimer's view: the effect plus the lease it holds."""

    lease_token: str | None = None
    lease_seconds: int | None = None


class HaltOut(Schema):
    """An active halt (409 `halted`, heartbeat answers): what is halted, why, by whom, since."""

    scope: Literal["tool", "agent", "run", "all"]
    value: str
    reason: str
    by: str
    since: datetime


class HeartbeatOut(ClaimedEffectOut):
    """A heartbeat's answer: the lease, and the halt covering the effect (null when none), so
    that a client can stop before it sends anything more."""

    halt: HaltOut | None


class EffectPage(Schema):
    items: list[EffectOut]
    next_cursor: str | None


class RecoveryItem(Schema):
    effect: EffectOut
    action: Literal["retry_safe", "reconcile", "review", "wait"]
    reason: str


class RecoveryOut(Schema):
    effects: list[RecoveryItem]
    # The incomplete effects in scope, by status (terminal statuses are not counted).
    counts_by_status: dict[str, int]
    next_cursor: str | None


class ErrorOut(Schema):
    error: str
    detail: str


# The error answers every operation declares (each with `ErrorOut`'s body).
ERRORS: dict[int, type[Schema]] = {
    status: ErrorOut for status in (400, 401, 403, 404, 409, 413, 415, 422, 429, 503)
}


class HealthOut(Schema):
    status: Literal["ok", "unavailable"]
    database: str
    redis: str
    error: str | None = None
    detail: str | None = None
    # Restore mode (the database went back in time): the ledger serves, but puts in doubt
    # what may have been lost; `restore_lost_since` is when the lost window began.
    restore_mode: bool = False
    restore_lost_since: datetime | None = None
