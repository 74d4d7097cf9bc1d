"""Four-eyes: *approve* and *reject* what waits for a second operator — an effect above its
tool's approval threshold (`awaiting_approval`), or a retry another operator proposed on nothing
but their word that the provider never received it (`reviews.decisions.approvals`)."""

from __future__ import annotations

from functools import partial

from django.db import transaction

from ledger.effects.intents import released_in_doubt
from ledger.effects.recovery import VERIFIED_ABSENT
from ledger.effects.transitions import SqlExpr, transition
from ledger.models import Effect, Reason
from ledger.models.states import Kind, Status
from ledger.policy.tools import policy_for
from ledger.rules.reviewqueue import open_review
from reconcilers.execution import can_execute, execute_after_commit
from reviews.decisions.approvals import waits_for_second_pair
from reviews.decisions.declaration import OUTCOME_UNKNOWN, Action, Carried, Carrying, DecisionKind
from reviews.decisions.kinds.resend import replan
from reviews.decisions.kinds.settle import cancel, cancel_preview
from reviews.decisions.whatnext import (
    LEDGER,
    PERSON,
    Facts,
    Line,
    Preview,
    base,
    released,
    resend,
)

_WAITING = frozenset({Status.AWAITING_APPROVAL, Status.UNKNOWN})
# An effect held for approval past its tool's window is escalated as well (`STALE`).
_HELD = frozenset({Reason.APPROVAL_REQUIRED, Reason.STALE})


def _approve_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    if effect.status == Status.UNKNOWN:  # a proposed retry: the second pair of eyes
        return resend(effect, facts, action, VERIFIED_ABSENT)
    if released_in_doubt(effect.kind, effect.requested_by, policy_for(effect.tool)):
        return base(
            effect,
            action,
            Status.UNKNOWN,
            LEDGER,
            Line(
                "Restore mode is on: the effect becomes unknown, and the ledger asks the "
                "provider by its idempotency key before anyone may send it. The lost window "
                "may have approved and sent it already."
            ),
        )
    return released(effect, facts, action)


def _approve(c: Carrying) -> Carried:
    if c.target.status != Status.AWAITING_APPROVAL:
        return replan(c)  # a retry proposal, approved: the retry is carried out
    if released_in_doubt(c.target.kind, c.target.requested_by, c.policy):
        return _approved_in_doubt(c)
    moved = transition(c.target, Status.PLANNED, actor=c.actor, reason=c.reason, data=c.data)
    if moved.kind == Kind.COMPENSATION and can_execute(moved.tool):
        execute_after_commit(moved.id)  # an operator's refund above the threshold
    return Carried(moved)


def _approved_in_doubt(c: Carrying) -> Carried:
    """Approved in restore mode: the effect may be one the lost branch approved and sent
    already, posted again, so it is looked up before it can be claimed (`unknown`, a check due
    now), as a new intent of its tool would be; a restored_gap item opens once the approval's
    own item is closed with this decision."""
    moved = transition(
        c.target,
        Status.UNKNOWN,
        actor=c.actor,
        reason=c.reason,
        changes={"next_check_at": SqlExpr("now()")},
        data={**c.data, "restore_mode": True},
    )
    transaction.on_commit(partial(open_review, moved.id, Reason.RESTORED_GAP))
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
    key="a",
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
    key="d",
    fields=("reason",),
    closes=_HELD,
    preview=_reject_preview,
    carry_out=_reject,
    dangerous=True,
    four_eyes=True,
)
