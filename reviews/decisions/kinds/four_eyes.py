"""Four-eyes: *approve* and *reject* what waits for a second operator — an effect above its
tool's approval threshold (`awaiting_approval`), or a retry another operator proposed on nothing
but their word that the provider never received it (`reviews.decisions.approvals`)."""

from __future__ import annotations

from ledger.effects.recovery import VERIFIED_ABSENT
from ledger.effects.states import Kind, Status
from ledger.effects.transitions import transition
from ledger.models import Effect, Reason
from reconcilers.execution import can_execute, execute_after_commit
from reviews.decisions.approvals import waits_for_second_pair
from reviews.decisions.declaration import OUTCOME_UNKNOWN, Action, Carried, Carrying, DecisionKind
from reviews.decisions.kinds.resend import replan
from reviews.decisions.kinds.settle import cancel, cancel_preview
from reviews.decisions.whatnext import PERSON, Facts, Line, Preview, base, released, resend

_WAITING = frozenset({Status.AWAITING_APPROVAL, Status.UNKNOWN})
# An effect held for approval past its tool's window is escalated as well (`STALE`).
_HELD = frozenset({Reason.APPROVAL_REQUIRED, Reason.STALE})


def _approve_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    if effect.status == Status.UNKNOWN:  # a proposed retry: the second pair of eyes
        return resend(effect, facts, action, VERIFIED_ABSENT)
    return released(effect, facts, action)


def _approve(c: Carrying) -> Carried:
    if c.target.status != Status.AWAITING_APPROVAL:
        return replan(c)  # a retry proposal, approved: the retry is carried out
    moved = transition(c.target, Status.PLANNED, actor=c.actor, reason=c.reason, data=c.data)
    if moved.kind == Kind.COMPENSATION and can_execute(moved.tool):
        execute_after_commit(moved.id)  # an operator's refund above the threshold
    return Carried(moved)


def _reject_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    waits, asker = waits_for_second_pair(effect)
    if effect.status != Status.UNKNOWN:
        return cancel_preview(effect, facts, action)
    who = f" {asker}'s" if waits and asker else " the"
    return base(
        effect,
        action,
        Status.UNKNOWN,
        PERSON,
        Line(f"The proposed retry is dropped:{who} proposal closes; nothing is sent."),
        Line("The effect stays unknown and its review item stays open for another decision."),
    )


def _reject(c: Carrying) -> Carried:
    if c.target.status != Status.UNKNOWN:
        return cancel(c)
    return Carried(c.target)  # a rejected retry proposal: the effect stays unknown


APPROVE = DecisionKind(
    action=Action.APPROVE,
    label="Approve (four-eyes)",
    past="approved",
    question="Approve {key} (four-eyes)?",
    # From unknown only while a retry proposal waits (`reviews.decisions.approvals` checks).
    from_statuses=_WAITING,
    fields=("reason",),
    closes=_HELD | OUTCOME_UNKNOWN,
    preview=_approve_preview,
    carry_out=_approve,
    four_eyes=True,
)

REJECT = DecisionKind(
    action=Action.REJECT,
    label="Reject (four-eyes)",
    past="rejected",
    question="Reject {key} (four-eyes)?",
    from_statuses=_WAITING,
    fields=("reason",),
    closes=_HELD,
    preview=_reject_preview,
    carry_out=_reject,
    dangerous=True,
    four_eyes=True,
)
