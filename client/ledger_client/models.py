"""Typed answers of the agent API. Each model mirrors a schema of `/api/v1/openapi.json`
(`tests/test_client_models.py` compares them field by field, so they cannot drift apart).

Unknown fields are kept, not refused: a newer ledger may add fields, and an older client must
still read its answers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

Status = Literal[
    "planned",
    "awaiting_approval",
    "dispatching",
    "awaiting_confirmation",
    "confirmed",
    "failed",
    "unknown",
    "cancelled",
    "compensated",
]
TERMINAL: frozenset[str] = frozenset({"confirmed", "failed", "cancelled", "compensated"})
Action = Literal["retry_safe", "reconcile", "review", "wait"]


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Redacted(Model):
    """What retention leaves of a request, response or error once the tool's retention has
    passed (`{"redacted": true}`): the effect is still answered, its values are gone."""

    redacted: Literal[True] = True

    def __str__(self) -> str:
        return "(redacted by the ledger's retention)"


def _redacted(value: Any) -> Any:
    if isinstance(value, dict) and value == {"redacted": True}:
        return Redacted()
    return value


# A stored JSON value, or the marker retention left in its place.
Recorded = Annotated[Any, BeforeValidator(_redacted)]


class Upstream(Model):
    id: str
    status: Status


class Provenance(Model):
    model: str | None = None
    prompt_hash: str | None = None
    tool_schema_version: str | None = None
    model_output: Any = None
    policy: Any = None


class Halt(Model):
    """An active halt: what is halted (`scope` and `value`), why, by whom, since when."""

    scope: Literal["tool", "agent", "run", "all"]
    value: str
    reason: str
    by: str
    since: datetime


class EffectRecord(Model):
    """One effect as the ledger holds it. `lease_token` and `lease_seconds` are set only for
    the claimer; `halt` only on a heartbeat's answer."""

    id: str
    effect_key: str
    run_id: str
    step_id: str
    seq: int
    agent: str
    tool: str
    target: str
    kind: Literal["action", "compensation", "decision"]
    status: Status
    attempt: int
    max_attempts: int
    idempotency_key: str
    lease_owner: str
    lease_expires_at: datetime | None
    provider_ref: str
    request: Annotated[dict[str, Any] | Redacted, BeforeValidator(_redacted)]
    response: Recorded
    error: Recorded
    depends_on: list[str]
    blocked_by: list[Upstream]
    parent_id: str | None
    requested_by: Literal["agent", "operator"]
    provenance: Provenance
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    lease_token: str | None = None
    lease_seconds: int | None = None
    halt: Halt | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def redacted(self) -> bool:
        """Retention has removed the effect's values (its target, request and results)."""
        return isinstance(self.request, Redacted)


class Approval(Model):
    """An effect that waits for an operator's approval (four-eyes), as a framework shows it to
    its user: what would be done, and where to follow it."""

    effect_id: str
    tool: str
    target: str
    run_id: str
    step_id: str
    request: dict[str, Any] | Redacted
    status: Status

    @classmethod
    def of(cls, effect: EffectRecord) -> Approval:
        return cls(
            effect_id=effect.id,
            tool=effect.tool,
            target=effect.target,
            run_id=effect.run_id,
            step_id=effect.step_id,
            request=effect.request,
            status=effect.status,
        )


class EffectPage(Model):
    """A page of effects (a listing or a run's journal); `next_cursor` asks for the next."""

    items: list[EffectRecord]
    next_cursor: str | None


class RecoveryItem(Model):
    effect: EffectRecord
    action: Action
    reason: str


class RecoveryPlan(Model):
    """The answer to "what is incomplete?" after a restart. Each item's `action`:

    - `retry_safe`: run the step again with the same identity; the earlier attempt provably
      did not happen, or a repeat under the same idempotency key cannot duplicate it.
    - `reconcile`: nothing to do; the ledger asks the provider and records what it finds.
    - `wait`: nothing yet: blocked, held under a live lease, or awaiting the provider.
    - `review`: never run again; nobody can tell whether it happened, an operator decides.
    """

    effects: list[RecoveryItem]
    # The incomplete effects in scope by status (older ledgers counted every status).
    counts_by_status: dict[str, int] = Field(default_factory=dict)
    # Where the next page starts; None on the last (and from a ledger that does not page).
    # `recover()` follows it, so its plan holds every page.
    next_cursor: str | None = None

    def __iter__(self) -> Iterator[RecoveryItem]:  # type: ignore[override]
        # A plan is read as its items; pydantic's field iteration is not needed on it.
        return iter(self.effects)

    def __len__(self) -> int:
        return len(self.effects)

    def with_action(self, action: Action) -> list[RecoveryItem]:
        return [item for item in self.effects if item.action == action]

    @property
    def retry_safe(self) -> list[RecoveryItem]:
        return self.with_action("retry_safe")

    @property
    def needs_review(self) -> list[RecoveryItem]:
        return self.with_action("review")


class Refusal(Model):
    """An error answer: `error` (the code, docs "Errors"), `detail` (a sentence), and the
    code's own fields: `fields` (422), `status`, `effect_id`, `halt`, `limit`, `retry_after`,
    `blocked_by`, `attempt` and `max_attempts`, `dependents`, `compensations`."""

    error: str
    detail: str
    fields: dict[str, str] | None = None
    status: str | None = None
    effect_id: str | None = None
    halt: Halt | None = None
    limit: Any = None
    retry_after: int | None = None
    blocked_by: list[Upstream] | None = None
    max_attempts: int | None = None


class Health(Model):
    status: Literal["ok", "unavailable"]
    database: str
    redis: str
    error: str | None = None
    detail: str | None = None
    # Restore mode (the database went back in time): the ledger serves, but puts in doubt
    # what may have been lost; `restore_lost_since` is when the lost window began.
    restore_mode: bool = False
    restore_lost_since: datetime | None = None
