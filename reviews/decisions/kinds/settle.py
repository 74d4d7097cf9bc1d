"""Settling an effect on what a person knows: *confirm* (the provider did it, with its reference;
also a compensation carried out by hand), *mark failed* (it did not), *cancel* (a planned effect
is never sent)."""

from __future__ import annotations

from collections.abc import Callable

from ledger.effects.transitions import SqlExpr, transition
from ledger.models import Effect, Reason
from ledger.models.states import Kind, Status
from reviews.decisions.declaration import (
    MISMATCH_REASONS,
    OUTCOME_UNKNOWN,
    Action,
    Carried,
    Carrying,
    DecisionKind,
)
from reviews.decisions.whatnext import NOBODY, Facts, Line, Preview, base, dependents

_UNSETTLED = frozenset({Status.UNKNOWN, Status.AWAITING_CONFIRMATION})


def _confirm_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    lines = [Line("The effect becomes confirmed with the provider's reference you give.")]
    if effect.kind == Kind.COMPENSATION and effect.parent_id:
        lines.append(
            Line("The effect it compensates becomes compensated (if it is still confirmed).")
        )
    lines.append(Line("Nothing is sent: no money moves; this records what the provider did."))
    lines += dependents(effect, facts, Status.CONFIRMED)
    return base(effect, action, Status.CONFIRMED, NOBODY, *lines)


def _confirm(c: Carrying) -> Carried:
    target = c.target
    if target.status == Status.PLANNED:
        # Carried out by hand: the operator held it (one attempt), then reports it done.
        target = transition(
            target,
            Status.DISPATCHING,
            actor=c.actor,
            reason="operator_executed",
            changes={"attempt": SqlExpr("attempt + 1"), "lease_owner": c.actor},
            where=[("attempt < max_attempts", [])],
            data={"decision": str(c.decision_id)},
        )
    changes = {"provider_ref": c.policy.redactor.text(c.ask.provider_ref.strip())}
    moved = transition(
        target, Status.CONFIRMED, actor=c.actor, reason=c.reason, changes=changes, data=c.data
    )
    return Carried(moved)


def _ends(status: Status, sentence: str) -> Callable[[Effect, Facts, str], Preview]:
    """The preview of a decision that ends the effect in `status` and sends nothing."""

    def build(effect: Effect, facts: Facts, action: str) -> Preview:
        return base(
            effect,
            action,
            status,
            NOBODY,
            Line(sentence.format(agent=effect.agent.name)),
            Line("Nothing is sent: no money moves."),
            *dependents(effect, facts, status),
        )

    return build


def _moves_to(status: Status) -> Callable[[Carrying], Carried]:
    """The carry-out of a decision that moves the effect to `status` and nothing more."""

    def carry_out(c: Carrying) -> Carried:
        return Carried(transition(c.target, status, actor=c.actor, reason=c.reason, data=c.data))

    return carry_out


cancel_preview = _ends(
    Status.CANCELLED,
    "The effect becomes cancelled before it is sent: {agent}'s claim of it will be refused.",
)
cancel = _moves_to(Status.CANCELLED)

CONFIRM = DecisionKind(
    action=Action.CONFIRM,
    label="Confirm",
    past="confirmed",
    question="Confirm {key} as done by the provider (ref {ref})?",
    from_statuses=_UNSETTLED,
    key="c",
    by_hand=True,
    fields=("provider_ref", "evidence", "reason"),
    required=frozenset({"provider_ref", "evidence"}),
    closes=OUTCOME_UNKNOWN
    | MISMATCH_REASONS
    | {Reason.ATTEMPTS_EXHAUSTED, Reason.MANUAL_EXECUTION},
    preview=_confirm_preview,
    carry_out=_confirm,
    in_bulk=True,
)

FAIL = DecisionKind(
    action=Action.FAIL,
    label="Mark failed",
    past="marked failed",
    question="Mark {key} as failed: the provider did not carry it out?",
    from_statuses=_UNSETTLED,
    key="f",
    fields=("evidence", "reason"),
    required=frozenset({"evidence"}),
    closes=OUTCOME_UNKNOWN | MISMATCH_REASONS | {Reason.ATTEMPTS_EXHAUSTED},
    preview=_ends(
        Status.FAILED,
        "The effect becomes failed: {agent} sees it failed and recovery never sends it again.",
    ),
    carry_out=_moves_to(Status.FAILED),
    dangerous=True,
    in_bulk=True,
)

CANCEL = DecisionKind(
    action=Action.CANCEL,
    label="Cancel",
    past="cancelled",
    question="Cancel {key}: it will never be sent?",
    from_statuses=frozenset({Status.PLANNED}),
    key="x",
    fields=("reason",),
    closes=frozenset({Reason.ATTEMPTS_EXHAUSTED, Reason.MANUAL_EXECUTION, Reason.STALE}),
    preview=cancel_preview,
    carry_out=cancel,
    dangerous=True,
    in_bulk=True,
)
