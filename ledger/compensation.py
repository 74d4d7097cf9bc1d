"""Compensations: a new effect that undoes a confirmed one (a refund for a charge)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ledger.errors import HasActiveDependents, InvalidTransition, ValidationFailed
from ledger.intents import Intent, find_repeat, record_intent
from ledger.models import Agent, Effect, EffectDependency
from ledger.states import Kind, Status
from ledger.tools import policy_for
from ledger.transitions import DUPLICATE_REFUND

# Downstream effects in these statuses may have acted on the parent's result.
_ACTIVE = (Status.DISPATCHING, Status.AWAITING_CONFIRMATION, Status.CONFIRMED, Status.UNKNOWN)


def active_dependents(effect: Effect, *, agent: Agent | None = None) -> list[dict[str, str]]:
    """Downstream effects that may have acted on `effect`; with `agent`, only that agent's.

    `depends_on` may name any agent's effect, so an agent's own compensation is held back only
    by its own dependents: another agent could otherwise block every refund of ours by
    depending on it, and the refusal would tell us about effects that are not ours. Operators,
    who see every agent, are held back by all of them (and may force).
    """
    rows = Effect.objects.filter(
        id__in=EffectDependency.objects.filter(upstream=effect).values("downstream_id"),
        status__in=_ACTIVE,
    )
    if agent is not None:
        rows = rows.filter(agent=agent)
    return [{"id": str(uid), "status": status} for uid, status in rows.values_list("id", "status")]


def compensate(
    agent: Agent,
    parent: Effect,
    *,
    tool: str | None,
    request: dict[str, Any],
    reason: str,
    compensation_key: str | None,
    actor: str,
    force: bool = False,
    operator: bool = False,
    duplicate: bool = False,
) -> tuple[Effect, bool]:
    """Record the compensation of `parent`. Returns (effect, created); a repeat with the same
    `compensation_key` returns the existing one. `operator` says a person asked (held back by
    every agent's dependents, not only `agent`'s); `force` (operators only) skips that check.
    `duplicate`: it undoes a second copy the provider made of `parent` (a duplicate charge),
    not `parent` itself, which stays confirmed once it is done (`DUPLICATE_REFUND`)."""
    if compensation_key is not None and ":" in compensation_key:
        # `{parent}:comp:{key}` must stay one compensation's key, never another's decision's.
        raise ValidationFailed(
            "A compensation key is one segment.",
            {"compensation_key": "must not contain ':'"},
        )
    parent_policy = policy_for(parent.tool)
    tool_name = tool or parent_policy.compensated_by
    if not tool_name:
        raise ValidationFailed(
            "No compensating tool given, and the parent's tool declares none.",
            {"tool": f"required: tool {parent.tool!r} has no compensated_by"},
        )
    intent = Intent(
        run_id=parent.run_id,
        step_id=f"{parent.step_id}:comp",
        tool=tool_name,
        target=parent.target,
        request=request,
        effect_key=f"{parent.effect_key}:comp:{compensation_key or 1}",
        provenance={
            "policy": {"compensates": str(parent.id), "reason": reason}
            | ({DUPLICATE_REFUND: True} if duplicate else {})
        },
        kind=Kind.COMPENSATION,
        parent_id=parent.id,
    )
    repeat = find_repeat(agent, intent)
    if repeat is not None:
        return repeat, False
    with transaction.atomic():
        # Lock the parent so that it cannot leave `confirmed` while its compensation is recorded.
        parent = Effect.objects.select_for_update().get(pk=parent.pk)
        if parent.status != Status.CONFIRMED:
            raise InvalidTransition(
                f"Only a confirmed effect can be compensated; this one is {parent.status}.",
                status=parent.status,
            )
        active = active_dependents(parent, agent=None if operator else agent)
        if active and not force:
            raise HasActiveDependents(
                "Downstream effects may have acted on this one; compensating it needs review.",
                dependents=active,
            )
        return record_intent(agent, intent, policy_for(tool_name), actor=actor)
