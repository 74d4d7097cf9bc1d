"""Closing an item with nothing to do at the provider: *not a duplicate* (one charge after all;
nothing moves) and *provider's record accepted* (the provider's record stands).

Why accepting the record moves an unknown effect: accepting the provider's record is the
operator saying "this is what happened", which for an effect nobody knows the end of is its
outcome. A settled effect is not moved (the state machine has no way back from a terminal
status, and what the ledger recorded stays in its history): the decision keeps the accepted
record.
"""

from __future__ import annotations

from typing import Any

from ledger.effects.transitions import transition
from ledger.errors import Refused
from ledger.models import Effect, Reason
from ledger.models.states import Status
from reviews.decisions.declaration import MISMATCH_REASONS, Action, Carried, Carrying, DecisionKind
from reviews.decisions.evidence import FAILED_STATUSES, Evidence
from reviews.decisions.refusals import NoRecord
from reviews.decisions.whatnext import NOBODY, Facts, Line, Preview, base, closes_only, dependents

_UNSETTLED = frozenset({Status.UNKNOWN, Status.AWAITING_CONFIRMATION})
_ANY = frozenset(Status)


def accepted_outcome(effect: Effect, evidence: Evidence) -> Status | None:
    """Where accepting the provider's record moves the effect: its outcome while it has none."""
    if effect.status not in _UNSETTLED or not evidence.record:
        return None
    return Status.FAILED if evidence.record_status in FAILED_STATUSES else Status.CONFIRMED


def _not_duplicate_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    return closes_only(effect, action)


def _not_duplicate(c: Carrying) -> Carried:
    return Carried(c.target)  # one charge after all: the item closes, nothing moves


def _accept_record_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    """The provider's record stands: an effect with no outcome yet takes the record's."""
    outcome = accepted_outcome(effect, facts.evidence)
    if outcome is None:
        return closes_only(effect, action)
    return base(
        effect,
        action,
        outcome,
        NOBODY,
        Line(
            f"The review item closes; the effect becomes {outcome}, as the provider's record says."
        ),
        Line("Nothing is sent: no money moves; this records what the provider did."),
        *dependents(effect, facts, outcome),
    )


def _accept_record_check(effect: Effect, evidence: Evidence, ground: str) -> Refused | None:
    if effect.status in _UNSETTLED and not evidence.record:
        return NoRecord(
            "No provider record is kept for this effect: confirm or mark it failed instead.",
        )
    return None


def _accepted(evidence: Evidence) -> dict[str, Any]:
    """What an accepted record leaves in the decision: the record itself and where it came
    from (a statement's line has no record event: the evidence text names it)."""
    return {
        "accepted_record": evidence.record_data.get("record"),
        "accepted_record_event": evidence.record.id if evidence.record else None,
    }


def _accept_record(c: Carrying) -> Carried:
    accepted = _accepted(c.evidence)
    outcome = accepted_outcome(c.target, c.evidence)
    if outcome is None:
        return Carried(c.target, details=accepted)  # settled already: the decision keeps it
    ref = c.evidence.record_ref
    changes = {"provider_ref": c.policy.redactor.text(ref)} if ref else {}
    data = {**c.data, "accepted_record_event": accepted["accepted_record_event"]}
    moved = transition(
        c.target, outcome, actor=c.actor, reason=c.reason, changes=changes, data=data
    )
    return Carried(moved, details=accepted)


NOT_DUPLICATE = DecisionKind(
    action=Action.NOT_DUPLICATE,
    label="Not a duplicate: same charge",
    past="closed as not a duplicate",
    question="Close {key} as not a duplicate (same charge)? Nothing is refunded.",
    from_statuses=_ANY,
    key="n",
    fields=("evidence", "reason"),
    required=frozenset({"evidence"}),
    # A repeated request (ledger.containment.repeated) made twice on purpose closes the same way.
    closes=frozenset({Reason.DUPLICATE, Reason.REPEATED_REQUEST}),
    closes_only=True,
    preview=_not_duplicate_preview,
    carry_out=_not_duplicate,
    in_bulk=True,
)

ACCEPT_RECORD = DecisionKind(
    action=Action.ACCEPT_RECORD,
    label="Provider's record accepted",
    past="settled by the provider's record",
    question="Accept the provider's record for {key} as what happened?",
    from_statuses=_ANY,
    key="p",
    fields=("evidence", "reason"),
    required=frozenset({"evidence"}),
    closes=MISMATCH_REASONS,
    closes_only=True,
    preview=_accept_record_preview,
    carry_out=_accept_record,
    check=_accept_record_check,
    in_bulk=True,
)
