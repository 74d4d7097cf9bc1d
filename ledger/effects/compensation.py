"""Compensations: a new effect that undoes a confirmed one (a refund for a charge)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from django.db import DatabaseError, transaction

from ledger.effects.intents import Intent, find_repeat, record_intent
from ledger.effects.transitions import DUPLICATE_REFUND
from ledger.errors import (
    CompensationLimitReached,
    EffectKeyConflict,
    HasActiveDependents,
    InvalidTransition,
    LedgerError,
    OperatorDecided,
    Refused,
    ValidationFailed,
)
from ledger.models import Agent, Effect, EffectDependency, RequestedBy
from ledger.models.states import INCOMPLETE, Kind, Status
from ledger.policy.tools import Policy, policy_for

# What the insert trigger of `ledger/sql/compensations.sql` raises on an agent's compensation
# that breaks a rule the checks below make first: the backstop for a process that skips them.
TRIGGER_MESSAGE = "ledger_compensation_refused"

# Downstream effects in these statuses may have acted on the parent's result.
_ACTIVE = (Status.DISPATCHING, Status.AWAITING_CONFIRMATION, Status.CONFIRMED, Status.UNKNOWN)

# An operator's compensation is keyed `{parent key}:comp:decision-{n}`, n its ordinal among the
# parent's operator compensations (1, 2, ...), counted with the parent locked: derived from
# what the ledger holds, never drawn at random, so that the same refund decided again on a
# database restored from before the first one gets the same key, and so the same idempotency
# key at the provider. Agents may not take the prefix (`_compensating_tool`). Keys recorded
# before (`decision-<uuid>`) stay as they are; they count among the ordinals.
OPERATOR_KEY_PREFIX = "decision-"


class CompensationUnderWay(Refused):
    """An operator's earlier compensation of the effect has not ended yet: one at a time, so
    that a decision sent twice (a double click) stays one compensation."""

    code = "compensation_under_way"


def operator_compensation_under_way(parent: Effect) -> Effect | None:
    """The operator's compensation of `parent` that has not ended yet (confirmed, failed or
    cancelled), if any."""
    return (
        Effect.objects.filter(
            parent=parent,
            kind=Kind.COMPENSATION,
            requested_by=RequestedBy.OPERATOR,
            status__in=INCOMPLETE,
        )
        .order_by("created_at")
        .first()
    )


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
    """Record the compensation of `parent`. Returns (effect, created); an agent's repeat with the
    same `compensation_key` returns the existing one. `operator` says a person asked (held back
    by every agent's dependents, not only `agent`'s); `force` (operators only) skips that check.
    An operator's compensation takes no `compensation_key`: its key is derived from its ordinal
    (`OPERATOR_KEY_PREFIX`), and it is refused while an earlier one is under way
    (`CompensationUnderWay`) or when its key is taken (`EffectKeyConflict`), never merged.
    `duplicate`: it undoes a second copy the provider made of `parent` (a duplicate charge),
    not `parent` itself, which stays confirmed once it is done (`DUPLICATE_REFUND`).

    An agent (not `operator`) compensates only effects it asked for itself, only with the tool
    the parent's tool declares in `compensated_by`, and at most that tool's
    `compensations_per_parent` times; PostgreSQL holds the same rules
    (`ledger/sql/compensations.sql`). The effect records who asked (`requested_by`), which
    halts and the agent endpoints read."""
    tool_name = _compensating_tool(parent, tool, compensation_key, operator=operator)
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
        requested_by=RequestedBy.OPERATOR if operator else RequestedBy.AGENT,
    )
    repeat = None if operator else find_repeat(agent, intent)
    if repeat is not None:
        return repeat, False
    try:
        return _record(agent, parent, intent, actor=actor, force=force, operator=operator)
    except DatabaseError as exc:
        refused = trigger_refusal(exc, parent.tool)
        if refused is None:
            raise
        raise refused from None


def _compensating_tool(
    parent: Effect, tool: str | None, compensation_key: str | None, *, operator: bool
) -> str:
    """The tool the compensation names, after the checks on what was asked."""
    if operator and compensation_key is not None:
        raise ValueError("An operator's compensation key is derived, never given.")
    if compensation_key is not None and ":" in compensation_key:
        # `{parent}:comp:{key}` must stay one compensation's key, never another's decision's.
        raise ValidationFailed(
            "A compensation key is one segment.",
            {"compensation_key": "must not contain ':'"},
        )
    if compensation_key is not None and compensation_key.startswith(OPERATOR_KEY_PREFIX):
        raise ValidationFailed(
            "This compensation key is reserved for operators' compensations.",
            {"compensation_key": f"must not start with {OPERATOR_KEY_PREFIX!r}"},
        )
    parent_policy = policy_for(parent.tool)
    tool_name = tool or parent_policy.compensated_by
    if not operator:
        _check_agents_tool(parent, parent_policy, tool_name)
    if not tool_name:
        raise ValidationFailed(
            "No compensating tool given, and the parent's tool declares none.",
            {"tool": f"required: tool {parent.tool!r} has no compensated_by"},
        )
    return tool_name


def _record(
    agent: Agent, parent: Effect, intent: Intent, *, actor: str, force: bool, operator: bool
) -> tuple[Effect, bool]:
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
        policy = policy_for(intent.tool)
        if operator:
            intent = _operators_intent(agent, parent, intent)
        else:
            _check_agents_count(parent, policy)
        return record_intent(agent, intent, policy, actor=actor)


def _operators_intent(agent: Agent, parent: Effect, intent: Intent) -> Intent:
    """`intent` under the key its ordinal gives (`OPERATOR_KEY_PREFIX`), once nothing stands in
    its way. Runs with the parent locked, so two decisions at once are counted one after the
    other: the second finds the first under way."""
    pending = operator_compensation_under_way(parent)
    if pending is not None:
        raise CompensationUnderWay(
            f"A compensation of this effect is under way ({pending.effect_key}, "
            f"{pending.status}): another waits until it is confirmed, failed or cancelled.",
            compensation=str(pending.id),
            status=pending.status,
        )
    earlier = Effect.objects.filter(
        parent=parent, kind=Kind.COMPENSATION, requested_by=RequestedBy.OPERATOR
    ).count()
    key = f"{parent.effect_key}:comp:{OPERATOR_KEY_PREFIX}{earlier + 1}"
    taken = Effect.objects.filter(agent=agent, effect_key=key).values_list("id", flat=True)
    if taken:
        raise EffectKeyConflict(
            f"The key of this compensation ({key}) is taken by another effect already: "
            "nothing was recorded.",
            effect_id=str(taken[0]),
        )
    return replace(intent, effect_key=key)


def _check_agents_tool(parent: Effect, parent_policy: Policy, tool_name: str) -> None:
    """An agent compensates its own effects, with the tool their tool declares, or not at all:
    naming any other tool would let it mint a lease for a charge under cover of a refund."""
    if parent.requested_by == RequestedBy.OPERATOR:
        raise OperatorDecided(
            "An operator decided this effect; only an operator can compensate it."
        )
    declared = parent_policy.compensated_by
    if not declared:
        raise ValidationFailed(
            f"Tool {parent.tool!r} declares no compensated_by: only an operator can "
            "compensate its effects.",
            {"tool": f"tool {parent.tool!r} has no compensated_by"},
        )
    if tool_name != declared:
        raise ValidationFailed(
            f"An agent compensates an effect of {parent.tool!r} with {declared!r} only.",
            {"tool": f"must be {declared!r} (the compensated_by of {parent.tool!r}) or absent"},
        )


def _check_agents_count(parent: Effect, policy: Policy) -> None:
    """At most the tool's `compensations_per_parent` of the agent's own compensations of one
    effect, cancelled ones aside. Runs with the parent locked, like the trigger's count."""
    taken = list(
        Effect.objects.filter(parent=parent, kind=Kind.COMPENSATION, requested_by=RequestedBy.AGENT)
        .exclude(status=Status.CANCELLED)
        .values_list("id", flat=True)
    )
    if len(taken) >= policy.compensations_per_parent:
        raise CompensationLimitReached(
            f"This effect has {len(taken)} compensation(s) already, and {policy.name!r} allows "
            f"{policy.compensations_per_parent} per effect; an operator can decide more.",
            limit=policy.compensations_per_parent,
            compensations=[str(uid) for uid in taken],
        )


def trigger_refusal(exc: DatabaseError, parent_tool: str) -> LedgerError | None:
    """The refusal for the compensation trigger's error, or None for any other error."""
    diag = getattr(exc.__cause__, "diag", None)
    if diag is None or diag.message_primary != TRIGGER_MESSAGE:
        return None
    detail = json.loads(diag.message_detail or "{}")
    reason = detail.get("reason")
    if reason == "limit_reached":
        return CompensationLimitReached(
            "This effect has as many compensations as its compensating tool allows.",
            limit=detail.get("limit"),
        )
    if reason == "operator_decided":
        return OperatorDecided("An operator decided this effect; only an operator can act on it.")
    return ValidationFailed(
        "An agent compensates its own effects, with the tool their tool declares, only.",
        {"tool": f"must be the compensated_by of {parent_tool!r}"},
    )
