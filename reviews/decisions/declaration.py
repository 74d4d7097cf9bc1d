"""What a decision kind is, declared once: the `Action` that names it and the `DecisionKind` that
says everything the pages and the domain know of it. The kinds themselves are declared in
`reviews.decisions.kinds`; `decide`, the form, the preview, the queue's bulk actions and the
effect page read them from there, so a new kind is one declaration (and its test).

An action's value is the word in `/effects/<id>/decide/<action>` and in every recorded decision
(`provenance.action`): the values never change.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ledger.errors import Refused
from ledger.models import Effect, Reason, ReviewItem
from ledger.models.states import Kind, Status
from ledger.policy.tools import Policy
from reconcilers.execution import can_execute
from reviews.decisions.evidence import Evidence
from reviews.decisions.whatnext import Facts, Preview


class Action(StrEnum):
    CONFIRM = "confirm"
    FAIL = "fail"
    RETRY = "retry"
    COMPENSATE = "compensate"
    CANCEL = "cancel"
    APPROVE = "approve"
    REJECT = "reject"
    NOT_DUPLICATE = "not_duplicate"
    ACCEPT_RECORD = "accept_record"
    EXTRA_ATTEMPT = "extra_attempt"


# Items that ask what happened to an effect whose outcome nobody knows.
OUTCOME_UNKNOWN = frozenset(
    {
        Reason.NO_LOOKUP,
        Reason.INCONCLUSIVE,
        Reason.STALE,
        Reason.NOT_FOUND_UNPROVEN,
        Reason.COMPENSATION_UNKNOWN,
        # Restore mode: the effect may have moved in a window the database lost.
        Reason.RESTORED_GAP,
    }
)
# Items that say the provider's record differs from ours.
MISMATCH_REASONS = frozenset(
    {
        Reason.MISMATCH,
        Reason.AMOUNT_MISMATCH,
        Reason.STATEMENT_CONTRADICTS,
        Reason.STATEMENT_LINE_REMOVED,
        Reason.COMPENSATION_FAILED,
    }
)


@dataclass(frozen=True)
class Ask:
    """What the operator asked for, as the form sent it."""

    action: str
    reason: str
    # The effect's version the operator saw: a decision on a stale view is refused.
    expected_version: int
    provider_ref: str = ""
    evidence: str = ""
    verified_absent: bool = False
    compensation_tool: str = ""
    compensation_request: dict[str, Any] = field(default_factory=dict)
    force: bool = False
    # The asker decides although another operator holds the item (`reviews.queue.holds`).
    over_hold: bool = False
    # Where the decision was taken: "page", "slack", "email", "api" or "command" (break-glass
    # on the server). Recorded with the decision; every channel goes through the same checks.
    channel: str = "page"
    # What the channel knows of where the ask came from, recorded with the decision when given
    # (details' `via`): the operator API's token ("token 12 (elop_1a2b3c4d5e6f)"), the server
    # account that ran `manage.py decide`. Never a secret.
    via: str = ""


@dataclass(frozen=True)
class Carrying:
    """What a kind's `carry_out` is given, inside the decision's transaction."""

    target: Effect
    ask: Ask
    policy: Policy
    actor: str  # "operator:<username>"
    decision_id: uuid.UUID
    # Why a resend cannot do it twice (`reviews.decisions.grounds`), where the kind resends.
    ground: str
    evidence: Evidence
    open_item: ReviewItem | None
    # The asker's reason, redacted, and the transition event's data, redacted.
    reason: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Carried:
    """What a kind's `carry_out` did: the target as it left it, the compensation it created,
    and what the decision records of it beside the ask."""

    moved: Effect
    follow_up: Effect | None = None
    details: dict[str, Any] = field(default_factory=dict)


# check(effect, evidence, ground) -> why the kind does not apply, or None.
Check = Callable[[Effect, Evidence, str], Refused | None]


@dataclass(frozen=True)
class DecisionKind:
    """Everything one decision kind means."""

    action: Action
    # What the page calls it (its disclosure, its dialog, the queue's bulk menu) and how a
    # refusal says it ("An effect in confirmed cannot be {past}.").
    label: str
    past: str
    # What the confirmation asks: `{key}` is the effect's key, `{ref}` the provider reference
    # typed (the dialog fills it in), `{one_more}` the attempts allowed after one more.
    question: str
    # The statuses it applies from (the state machine decides the rest).
    from_statuses: frozenset[Status]
    # Its keyboard shortcut (static/app.js, listed by the `?` help): one lowercase letter, its
    # own, that opens it on the effect page, and on the queue the current row's effect with it.
    key: str
    # The form's fields it shows, in order, and those it needs filled (`reason` always).
    fields: tuple[str, ...]
    # The open review items' reasons it settles; with `closes_only`, it is refused on an item
    # of any other reason (and where no item is open).
    closes: frozenset[Reason]
    # What it will lead to (`reviews.decisions.whatnext`): builder(effect, facts, action).
    preview: Callable[[Effect, Facts, str], Preview]
    # The target's side of the decision, inside its transaction.
    carry_out: Callable[[Carrying], Carried]
    required: frozenset[str] = frozenset()
    closes_only: bool = False
    # Its button and dialog are marked as dangerous (it ends or drops what was asked for).
    dangerous: bool = False
    # Four-eyes: offered only where something waits for a second operator, never to the one
    # who asked for it (`reviews.decisions.approvals`).
    four_eyes: bool = False
    # It sends the effect again: never once a lookup found it, nor while a mismatch is open.
    resends: bool = False
    # Its `check` weighs why a resend cannot do it twice: callers work the ground out first.
    grounded: bool = False
    # Also applies to a compensation that waits, planned, for a person to carry it out.
    by_hand: bool = False
    # A bulk action may apply it to many items, on evidence stated once for all.
    in_bulk: bool = False
    # Its own rule of where it applies, beyond the statuses and the item's reason.
    check: Check | None = None
    # The form's pre-filled fields, beyond the suggestion's: initial(effect).
    initial: Callable[[Effect], dict[str, Any]] | None = None

    def starts_from(self, effect: Effect) -> bool:
        """Whether the effect's status lets this kind apply."""
        return effect.status in self.from_statuses or (
            self.by_hand and by_hand_compensation(effect)
        )

    def question_for(self, effect: Effect, ref: str = "{ref}") -> str:
        """The confirmation's question for this effect; `ref` stays `{ref}` for the dialog."""
        return self.question.format(
            key=effect.effect_key, ref=ref, one_more=effect.max_attempts + 1
        )


def by_hand_compensation(effect: Effect) -> bool:
    """A compensation nobody can execute automatically waits, planned, for a person to carry it
    out and confirm it."""
    return (
        effect.kind == Kind.COMPENSATION
        and effect.status == Status.PLANNED
        and not can_execute(effect.tool)
    )
