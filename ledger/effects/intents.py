"""Recording intent before dispatch: the write-ahead part of the ledger."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from ledger.effects.transitions import SqlExpr, column_values, one_effect, record_event
from ledger.errors import EffectKeyConflict, Forbidden, ValidationFailed
from ledger.models import (
    Agent,
    Effect,
    EffectDependency,
    EventKind,
    Mode,
    Reason,
    RequestedBy,
    Run,
)
from ledger.models.states import Kind, Status
from ledger.policy import digests
from ledger.policy.money import amount_of
from ledger.policy.redaction import Redactor
from ledger.policy.tools import Policy
from ledger.rules.four_eyes import needs_approval
from ledger.rules.restore_state import starts_in_doubt
from ledger.rules.reviewqueue import open_review

_EFFECT_TABLE = Effect._meta.db_table
_RUN_TABLE = Run._meta.db_table


@dataclass
class Intent:
    run_id: str
    step_id: str
    tool: str
    target: str
    request: dict[str, Any]
    effect_key: str | None = None
    depends_on: Sequence[uuid.UUID] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    kind: Kind = Kind.ACTION
    parent_id: uuid.UUID | None = None
    callback_url: str = ""  # ledger.api.notifications; not part of the request's identity
    requested_by: RequestedBy = RequestedBy.AGENT  # an operator's decision, or the agent

    @property
    def key(self) -> str:
        return self.effect_key or f"{self.run_id}:{self.step_id}"


# The ledger composes keys for the effects it records itself: `{key}:comp:{n}` for a
# compensation, `{key}:decision:{n}` for a decision. An agent that took such a key first would
# block them (a decision whose key is taken is refused as "changed since you opened it").
RESERVED_SEGMENTS = (":comp:", ":decision:")


def check_agent_key(intent: Intent) -> None:
    """Refuse an agent's intent whose key, given or composed from `run_id:step_id`, lies in the
    ledger's own namespace."""
    for segment in RESERVED_SEGMENTS:
        if segment in intent.key:
            field = "effect_key" if intent.effect_key else "step_id"
            raise ValidationFailed(
                "This key is reserved for effects the ledger records itself.",
                {
                    field: f"the effect key {'' if intent.effect_key else '(run_id:step_id) '}"
                    f"must not contain {segment!r}"
                },
            )


def check_mode(agent: Agent, policy: Policy) -> None:
    """A test agent may name only test tools (an undeclared tool is live), so that nothing a
    test agent records can reach a live provider; a live agent may name either."""
    if agent.mode == Mode.TEST and policy.mode != Mode.TEST:
        raise Forbidden(
            f"Agent {agent.name!r} is a test agent; tool {policy.name!r} is not a test tool.",
            tool=policy.name,
        )


def find_repeat(agent: Agent, intent: Intent) -> Effect | None:
    """The effect already recorded under this key, if the request is the same; a different
    request under the same key is a conflict."""
    existing = one_effect(
        f"SELECT * FROM {_EFFECT_TABLE} WHERE agent_id = %s AND effect_key = %s",
        [agent.id, intent.key],
    )
    if existing is None:
        return None
    if not digests.same_request(existing.request_hash, intent.tool, intent.target, intent.request):
        raise EffectKeyConflict(
            "An effect with this effect_key was recorded with a different request.",
            effect_id=str(existing.id),
        )
    return existing


def next_seq(agent: Agent, run_id: str) -> int:
    # One row per (agent, run): the upsert's row lock orders concurrent intents of one run.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_RUN_TABLE} (agent_id, run_id, last_seq, created_at) "
            f"VALUES (%s, %s, 1, now()) ON CONFLICT (agent_id, run_id) "
            f"DO UPDATE SET last_seq = {_RUN_TABLE}.last_seq + 1 RETURNING last_seq",
            [agent.id, run_id],
        )
        return cursor.fetchone()[0]


def insert_effect(values: dict[str, Any]) -> Effect | None:
    """Insert one effect row; None when (agent, effect_key) is taken already. An `SqlExpr`
    value is computed by the database (its clock)."""
    columns, placeholders, params = column_values(values)
    sql = (
        f"INSERT INTO {_EFFECT_TABLE} ({', '.join(columns)}, created_at, updated_at) "
        f"VALUES ({', '.join(placeholders)}, now(), now()) "
        f"ON CONFLICT (agent_id, effect_key) DO NOTHING RETURNING *"
    )
    return one_effect(sql, params)


def effect_row(
    agent: Agent,
    intent: Intent,
    redact: Redactor,
    *,
    status: Status,
    max_attempts: int,
    seq: Any = None,
    **more: Any,
) -> dict[str, Any]:
    """The columns of a new effect recording `intent` (`insert_effect` takes them): ids and
    digests derived from the raw request, the request itself redacted, counters at zero. `seq`
    is the run's next number unless given (an `SqlExpr` when the statement computes it)."""
    return {
        "id": uuid.uuid4(),
        "agent": agent.id,
        "effect_key": intent.key,
        "run_id": intent.run_id,
        "step_id": intent.step_id,
        "seq": next_seq(agent, intent.run_id) if seq is None else seq,
        "kind": intent.kind,
        "tool": intent.tool,
        "target": redact.text(intent.target),
        "request": redact(intent.request),
        "request_hash": digests.request_hash(intent.tool, intent.target, intent.request),
        "idempotency_key": digests.idempotency_key(agent.id, intent.key),
        "status": status,
        "attempt": 0,
        "checks": 0,
        "max_attempts": max_attempts,
        "lease_owner": "",
        "provider_ref": "",
        "outcome_digest": "",
        "outcome_token": "",
        "parent": intent.parent_id,
        "provenance": redact(intent.provenance),
        "version": 1,
        "callback_url": intent.callback_url,
        "requested_by": intent.requested_by,
        **more,
    }


def first_status(agent: Agent, intent: Intent, policy: Policy) -> Status:
    """The status a new effect recording `intent` starts in, after the checks every intent
    passes: the agent's mode, and an amount the tool's limits can read (422 otherwise).
    Four-eyes is decided once, here: awaiting_approval above the tool's threshold. In restore
    mode an agent's action whose tool cannot deduplicate it starts in doubt (`unknown`): it may
    be an effect the ledger lost, posted again (`ledger.rules.restore_state`). So does a
    compensation, an operator's or an agent's: one decided again after a restore gets the key
    the lost one had, which protects only a provider that honours keys; in doubt,
    reconciliation looks it up by key before it can be sent. Four-eyes goes first: an approver
    decides on it either way."""
    check_mode(agent, policy)
    amount_of(policy, intent.request)
    if needs_approval(policy, intent.request):
        return Status.AWAITING_APPROVAL
    if released_in_doubt(intent.kind, intent.requested_by, policy):
        return Status.UNKNOWN
    return Status.PLANNED


def released_in_doubt(kind: str, requested_by: str, policy: Policy) -> bool:
    """Whether an effect of this kind, once free to be claimed (new, or approved by a second
    operator), starts in doubt instead: in restore mode, an agent's action or any compensation
    whose tool cannot deduplicate it (`first_status`)."""
    doubted_kind = kind == Kind.COMPENSATION or (
        kind == Kind.ACTION and requested_by == RequestedBy.AGENT
    )
    return doubted_kind and starts_in_doubt(policy)


def record_intent(
    agent: Agent, intent: Intent, policy: Policy, *, actor: str
) -> tuple[Effect, bool]:
    """Record `intent` as a planned effect. Returns (effect, created).

    Must run inside a transaction (the caller may claim in the same one).
    """
    status = first_status(agent, intent, policy)
    repeat = find_repeat(agent, intent)
    if repeat is not None:
        return repeat, False
    upstream = list(dict.fromkeys(intent.depends_on))
    if upstream:
        known = set(Effect.objects.filter(id__in=upstream).values_list("id", flat=True))
        missing = [str(u) for u in upstream if u not in known]
        if missing:
            raise ValidationFailed(
                "depends_on names effects that do not exist.",
                {"depends_on": f"unknown effect ids: {', '.join(missing)}"},
            )
    effect = insert_effect(
        effect_row(
            agent,
            intent,
            policy.redactor,
            status=status,
            max_attempts=policy.max_attempts,
            # In doubt from the start: the reconciler looks it up before anyone may claim it.
            **({"next_check_at": SqlExpr("now()")} if status == Status.UNKNOWN else {}),
        )
    )
    if effect is None:
        # A concurrent request recorded the same key between our look-up and insert.
        repeat = find_repeat(agent, intent)
        assert repeat is not None
        return repeat, False
    EffectDependency.objects.bulk_create(
        EffectDependency(downstream_id=effect.id, upstream_id=u) for u in upstream
    )
    record_event(
        effect.id,
        kind=EventKind.INTENT,
        actor=actor,
        to_status=status,
        reason="intent",
        data={"request_hash": effect.request_hash, "depends_on": [str(u) for u in upstream]},
    )
    if status == Status.AWAITING_APPROVAL:
        open_review(effect.id, Reason.APPROVAL_REQUIRED)
    elif status == Status.UNKNOWN:
        open_review(effect.id, Reason.RESTORED_GAP)
    return effect, True
