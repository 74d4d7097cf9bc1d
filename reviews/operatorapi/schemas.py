"""Wire formats of the operator API (docs/operator-api.md). Inputs forbid unknown fields, as the
agent API's do; free JSON is the document's `JsonObject` (`ledger.api.contract`)."""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import BeforeValidator, Field, StrictBool, StrictInt

from ledger.api.schemas import Input, JsonObject
from ledger.models import Reason
from ledger.models.states import Kind, Status
from reviews.decisions.declaration import Action

# The `next_cursor` of the page before: the number of its last item.
QUEUE_CURSOR = r"^[1-9][0-9]{0,17}$"
QUEUE_PAGE = 50
QUEUE_PAGE_MAX = 200


class QueueQuery(Schema):
    limit: int = Field(QUEUE_PAGE, ge=1, le=QUEUE_PAGE_MAX)
    cursor: str | None = Field(
        None, pattern=QUEUE_CURSOR, description="The `next_cursor` of the page before."
    )
    reason: Reason | None = Field(None, description="Only items opened for this reason.")
    tool: str | None = Field(None, max_length=100, description="Only items of this tool.")


class SuggestedOut(Schema):
    """The decision the evidence suggests: `ask` is a ready body for `POST …/decisions` (its
    fields as the page's form pre-fills them; check them, and send it as it is or amended)."""

    action: Action
    label: str
    ask: dict[str, Any]


class QueueRowOut(Schema):
    item: int
    effect_id: uuid.UUID
    effect_key: str
    reason: Reason
    severity: str
    opened_at: datetime
    due_at: datetime
    tool: str
    agent: str
    target: str
    status: Status
    version: int
    amount: str | None = Field(description="What is at stake, in major units (`10.00`).")
    currency: str | None
    assignee: str | None
    suggested: Action | None = Field(
        description="The action the evidence suggests, where it suggests one."
    )
    suggested_label: str | None


class QueuePageOut(Schema):
    items: list[QueueRowOut]
    next_cursor: str | None


class EffectSummaryOut(Schema):
    id: uuid.UUID
    effect_key: str
    kind: Kind
    tool: str
    target: str
    agent: str
    run_id: str
    status: Status
    version: int = Field(description="Send it back as `expected_version` with a decision.")
    attempt: int
    max_attempts: int
    provider_ref: str
    amount: str | None
    currency: str | None
    requested_by: Literal["agent", "operator"]
    created_at: datetime
    updated_at: datetime


class ItemOut(Schema):
    id: int
    reason: Reason
    severity: str
    opened_at: datetime
    due_at: datetime
    assignee: str | None
    held_by: str | None = Field(description="Who holds the item now, if anyone does.")


class PreviewLineOut(Schema):
    text: str
    money: str
    when: datetime | None


class PreviewOut(Schema):
    """What the decision will lead to, as the page's preview says it."""

    status: str
    actor: Literal["ledger", "agent", "person", "nobody"]
    lines: list[PreviewLineOut]
    money_moves: bool


class OfferedOut(Schema):
    action: Action
    label: str
    dangerous: bool
    fields: list[str] = Field(description="The fields this decision reads, in the form's order.")
    required: list[str] = Field(description="Those it needs filled, besides `reason`.")
    question: str = Field(description="What the page's confirmation asks.")
    preview: PreviewOut


class FourEyesOut(Schema):
    waits: bool = Field(description="Something waits for a second operator's decision.")
    asked_by: str = Field(description="Who asked for it (empty for an agent).")
    yours: bool = Field(description="You asked for it: another operator decides.")


class OperatorItemOut(Schema):
    effect: EffectSummaryOut
    item: ItemOut | None
    actions: list[OfferedOut] = Field(description="The decisions offered to you, now.")
    suggested: SuggestedOut | None
    four_eyes: FourEyesOut


def _whole(value: Any) -> Any:
    """1.0 is the integer 1 in JSON, as the agent API reads it (bodies are read exactly, so a
    number with a fraction arrives as a `Decimal`)."""
    finite = isinstance(value, Decimal | float) and math.isfinite(value)
    return int(value) if finite and value == int(value) else value


Version = Annotated[StrictInt, Field(ge=1), BeforeValidator(_whole)]


class DecisionIn(Input):
    """A decision, as the page's form takes it. Fields the action does not read are ignored,
    as the form ignores its hidden fields."""

    action: Action
    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    expected_version: Version = Field(description="The effect's `version` you decided on.")
    provider_ref: Annotated[str, Field(max_length=500)] = ""
    evidence: Annotated[str, Field(max_length=2000)] = ""
    verified_absent: StrictBool = False
    compensation_tool: Annotated[str, Field(max_length=100)] = ""
    compensation_request: JsonObject = {}
    force: StrictBool = False
    over_hold: StrictBool = Field(
        False, description="Decide although another operator holds the item."
    )


class DecisionOut(Schema):
    decision_id: uuid.UUID
    action: str = Field(
        description="As recorded: `propose_retry` for a retry a second operator must approve."
    )
    channel: Literal["api"]
    effect_id: uuid.UUID
    status: Status
    version: int
    follow_up: uuid.UUID | None = Field(description="The compensation a `compensate` made.")
