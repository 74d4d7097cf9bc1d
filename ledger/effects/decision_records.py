"""Recording a decision: a ruling on an effect, kept as an effect of its own.

A decision (kind `decision`, status `confirmed`, `parent` = the effect decided on) records who
decided what, why, and the target as it was before and after. The caller records it in the
same transaction as the target's move and the review item's resolution, so that all three
commit or none does (docs/concepts.md#review-and-escalation). Operators decide through
`reviews.decisions`; the ledger's own rulings record themselves here too. A decision about
something that is not an effect (halting a tool, `ledger.containment.halts`) has no parent
and names its subject in `target`.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models.functions import Now

from ledger.effects.intents import Intent, effect_row, insert_effect
from ledger.effects.transitions import SqlExpr, Superseded, one_effect, record_event
from ledger.models import Agent, Effect, EventKind, RequestedBy, ReviewItem
from ledger.models.states import Kind, Status
from ledger.policy.redaction import Redactor, scrub_cards
from ledger.policy.tools import policy_for

# The pseudo-tool under which decision effects are recorded.
DECISION_TOOL = "operator_decision"


def snapshot(effect: Effect) -> dict[str, Any]:
    """What a decision keeps of its target, before and after."""
    return {
        "status": effect.status,
        "version": effect.version,
        "attempt": effect.attempt,
        "provider_ref": effect.provider_ref,
    }


def record_decision(
    before: Effect,
    after: Effect,
    *,
    action: str,
    reason: str,
    asked: dict[str, Any],
    actor: str,
    details: dict[str, Any],
    review: ReviewItem | None = None,
    decision_id: uuid.UUID | None = None,
    agent: Agent | None = None,
) -> Effect | None:
    """Insert the decision on `before` (now `after`) with its event; None when another decision
    took its key first (the caller's transaction must then roll back).

    `asked` is the request as it was made, `details` what else the decision's provenance keeps;
    both are redacted by the target's tool. The decision is recorded under `agent`, by default
    the target's own.
    """
    redact = policy_for(before.tool).redactor
    number = Effect.objects.filter(parent=before, kind=Kind.DECISION).count() + 1
    provenance = {
        "actor": actor,
        "action": action,
        "reason": reason,
        "review_item": review.pk if review else None,
        "review_reason": review.reason if review else None,
        "before": snapshot(before),
        "after": snapshot(after),
        **details,
    }
    intent = Intent(
        run_id=before.run_id,
        step_id=f"{before.step_id}:decision",
        tool=DECISION_TOOL,
        target=f"effect:{before.id}",
        request=asked,
        effect_key=f"{before.effect_key}:decision:{number}",
        provenance=provenance,
        kind=Kind.DECISION,
        parent_id=before.id,
    )
    return _insert(
        agent or before.agent,
        intent,
        redact,
        actor=actor,
        reason=reason,
        event={
            "target": str(before.id),
            "action": action,
            "before": provenance["before"],
            "after": provenance["after"],
        },
        decision_id=decision_id,
    )


def record_standalone_decision(
    agent: Agent,
    *,
    target: str,
    run_id: str,
    key: str,
    action: str,
    reason: str,
    asked: dict[str, Any],
    actor: str,
    details: dict[str, Any],
) -> Effect | None:
    """Insert a decision about something that is not an effect (a halt: `target` =
    "halt:<scope>:<value>"), with no parent, under `agent` in run `run_id`; its effect key is
    `key` (which must contain ":decision:"). None when the key is taken already."""
    redact = policy_for(DECISION_TOOL).redactor
    intent = Intent(
        run_id=run_id,
        step_id=key.split(":decision:")[0],
        tool=DECISION_TOOL,
        target=target,
        request=asked,
        effect_key=key,
        provenance={"actor": actor, "action": action, "reason": reason, **details},
        kind=Kind.DECISION,
    )
    return _insert(
        agent,
        intent,
        redact,
        actor=actor,
        reason=reason,
        event={"target": target, "action": action, **details},
    )


def _insert(
    agent: Agent,
    intent: Intent,
    redact: Redactor,
    *,
    actor: str,
    reason: str,
    event: dict[str, Any],
    decision_id: uuid.UUID | None = None,
) -> Effect | None:
    """The decision effect, confirmed at once, and its `decision` event."""
    row = effect_row(
        agent,
        intent,
        redact,
        status=Status.CONFIRMED,
        max_attempts=1,
        resolved_at=SqlExpr("now()"),
    )
    if decision_id is not None:
        row["id"] = decision_id
    # Never the agent's, though recorded under its agent: a person's ruling or the ledger's.
    row["requested_by"] = RequestedBy.OPERATOR
    decision = insert_effect(row)
    if decision is None:
        return None
    record_event(
        decision.id,
        kind=EventKind.DECISION,
        actor=actor,
        to_status=Status.CONFIRMED,
        reason=redact.text(reason),
        data=redact(event),
    )
    return decision


def resolve_review(item: ReviewItem, *, decision_id: uuid.UUID, user: Any, summary: str) -> bool:
    """Close `item` with the decision that settled it; False when it was closed already (the
    caller lost a race and must roll back)."""
    return bool(
        ReviewItem.objects.filter(pk=item.pk, resolved_at__isnull=True).update(
            resolved_at=Now(),
            resolved_by=user,
            # Typed by a person: a card number in it is tokenized like any stored text.
            resolution=scrub_cards(summary)[:2000],
            decision_id=decision_id,
        )
    )


def grant_attempt(effect: Effect, *, actor: str, reason: str, data: dict[str, Any]) -> Effect:
    """One more attempt for a planned effect whose attempts are used up (an operator's
    `extra_attempt`): its cap rises by one and it stays planned, so its owner may claim it
    again. Not a transition (the status does not change), but versioned like one and kept in
    the effect's history; raises `Superseded` when the effect moved meanwhile."""
    sql = (
        f"UPDATE {Effect._meta.db_table} SET max_attempts = max_attempts + 1, "
        "version = version + 1, updated_at = now() "
        "WHERE id = %s AND status = %s AND version = %s RETURNING *"
    )
    moved = one_effect(sql, [effect.id, Status.PLANNED.value, effect.version])
    if moved is None:
        raise Superseded(effect.id)
    record_event(
        effect.id,
        kind=EventKind.TRANSITION,
        actor=actor,
        from_status=Status.PLANNED,
        to_status=Status.PLANNED,
        reason=reason,
        data={**data, "max_attempts": moved.max_attempts},
    )
    return moved
