"""*Compensate*: undo a confirmed effect with a compensating effect of its own (its own id and
key), sent by the ledger through the tool's adapter where it can, otherwise queued for a person
(`manual_execution`). On a duplicate item it refunds the provider's second charge, and the
effect itself stays confirmed.

The compensation's key is `{effect key}:comp:decision-{n}`, n its ordinal among the effect's
operator compensations (`ledger.effects.compensation.OPERATOR_KEY_PREFIX`): the same refund
decided again on a database restored from before the first gets the same idempotency key. One
at a time: while one is under way, another is refused, so a decision sent twice stays one."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ledger import jsonenc
from ledger.effects.compensation import (
    CompensationUnderWay,
    active_dependents,
    compensate,
    operator_compensation_under_way,
)
from ledger.effects.transitions import Superseded
from ledger.errors import Refused
from ledger.models import Effect, Reason
from ledger.models.states import Kind, Status
from ledger.policy.tools import policy_for
from ledger.rules.reviewqueue import open_review
from reconcilers.execution import can_execute, execute_after_commit
from reviews.decisions.declaration import MISMATCH_REASONS, Action, Carried, Carrying, DecisionKind
from reviews.decisions.evidence import Evidence
from reviews.decisions.refusals import AlreadyDecided
from reviews.decisions.whatnext import (
    LEDGER,
    PERSON,
    Facts,
    Line,
    Preview,
    base,
    count,
    dependents,
    money_of,
)


def _preview(effect: Effect, facts: Facts, action: str) -> Preview:
    tool = facts.policy.compensated_by
    if not tool:
        return base(
            effect,
            action,
            effect.status,
            PERSON,
            Line(f"{effect.tool} declares no compensating tool: name one in the form."),
        )
    actor, lines = _sender(tool)
    money = money_of(effect)
    if money:
        lines.append(Line("It refunds", money=money))
    else:
        lines.append(Line("It undoes what the compensation request in the form names."))
    if facts.item is not None and facts.item.reason == Reason.DUPLICATE:
        # ledger.effects.compensation(duplicate=True): the provider's second charge is undone.
        lines.append(
            Line(
                "It refunds the provider's duplicate, named in the form: once that is "
                "confirmed, the effect stays confirmed, its own charge standing."
            )
        )
    else:
        lines += _once_confirmed(effect, facts)
    return replace(base(effect, action, Status.CONFIRMED, actor, *lines), money_moves=True)


def _sender(tool: str) -> tuple[str, list[Line]]:
    """Who sends the compensation: the ledger, through the tool's adapter, or a person."""
    lines = [Line("The effect stays confirmed until the compensation is confirmed.")]
    if can_execute(tool):
        lines.append(
            Line(f"The ledger sends the compensation itself, through {tool}, after the decision:")
        )
        return LEDGER, lines
    lines.append(
        Line(
            f"Nobody can send {tool} automatically: it waits, planned, for a person to carry "
            "it out and confirm it (a review item opens)."
        )
    )
    return PERSON, lines


def _once_confirmed(effect: Effect, facts: Facts) -> list[Line]:
    """What follows once the provider confirms the compensation: the effect is compensated,
    and what relied on it may need undoing too."""
    lines = [Line("Once the provider confirms it, the effect becomes compensated.")]
    active = active_dependents(effect)
    if active:
        lines.append(
            Line(
                f"{count(len(active), 'dependent')} may have acted on it already: the ledger "
                "refuses unless you force it, and they may need compensating too."
            )
        )
    return lines + dependents(effect, facts, Status.COMPENSATED, compensating=True)


def _carry_out(c: Carrying) -> Carried:
    target, ask = c.target, c.ask
    try:
        compensation, _ = compensate(
            target.agent,
            target,
            tool=ask.compensation_tool or None,
            request=ask.compensation_request,
            reason=c.reason,
            compensation_key=None,  # derived from its ordinal, never random
            actor=c.actor,
            force=ask.force,
            operator=True,
            # On a duplicate item it refunds the provider's second charge, not the first.
            duplicate=c.open_item is not None and c.open_item.reason == Reason.DUPLICATE,
        )
    except CompensationUnderWay:
        # `_check` let it through: another decision committed meanwhile (`decide` names it).
        raise Superseded(target.id) from None
    if can_execute(compensation.tool):
        execute_after_commit(compensation.id)
    else:
        open_review(compensation.id, Reason.MANUAL_EXECUTION)
    return Carried(target, follow_up=compensation)


def _check(effect: Effect, evidence: Evidence, ground: str) -> Refused | None:
    """Refused while an earlier compensation decided by an operator is under way: a second
    click (or a second operator) would otherwise refund twice. It names who decided it."""
    pending = operator_compensation_under_way(effect)
    if pending is None:
        return None
    decided = (
        Effect.objects.filter(
            parent=effect, kind=Kind.DECISION, provenance__compensation=str(pending.id)
        )
        .values_list("provenance", "created_at")
        .first()
    )
    provenance, when = decided if decided is not None else ({}, None)
    by = str(provenance.get("actor", "")).removeprefix("operator:")
    return AlreadyDecided(
        f"Already decided by {by or 'an operator'} (compensate): its compensation "
        f"{pending.effect_key} is {pending.status}; another waits until it is confirmed, "
        "failed or cancelled.",
        status=effect.status,
        version=effect.version,
        decided_by=by,
        decided_at=when.isoformat() if when else None,
        compensation=str(pending.id),
    )


def _initial(effect: Effect) -> dict[str, Any]:
    """A starting point for the form: the tool's compensating tool, and a request that undoes
    the effect by the provider's reference."""
    request: dict[str, Any] = {}
    if effect.provider_ref:
        request["charge" if "amount" in (effect.request or {}) else "reference"] = (
            effect.provider_ref
        )
    if isinstance(effect.request, dict) and "amount" in effect.request:
        request["amount"] = effect.request["amount"]
    shown = json.dumps(json.loads(jsonenc.dumps(request)), indent=2, ensure_ascii=False)
    return {
        "compensation_request": shown if request else "{}",
        "compensation_tool": policy_for(effect.tool).compensated_by,
    }


COMPENSATE = DecisionKind(
    action=Action.COMPENSATE,
    label="Compensate",
    past="compensated",
    question="Compensate {key}: undo it with a compensating effect?",
    from_statuses=frozenset({Status.CONFIRMED}),
    key="u",
    fields=("compensation_tool", "compensation_request", "force", "reason"),
    # A repeated request (ledger.containment.repeated) is undone by compensating the later effect.
    closes=MISMATCH_REASONS | {Reason.DUPLICATE, Reason.REPEATED_REQUEST},
    preview=_preview,
    carry_out=_carry_out,
    check=_check,
    initial=_initial,
)
