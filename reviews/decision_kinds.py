"""Which decision applies where: the decision kinds, and the rules that refuse a kind where it
does not apply (the page offers only what passes them; `reviews.decisions.decide` checks again).

Every reason a review item opens for has a decision that closes it, and where nothing needs
doing at the provider that decision does nothing there:

| open item's reason                       | closes it without a side effect                |
| ---------------------------------------- | ---------------------------------------------- |
| duplicate                                | not_duplicate: one charge after all; no move   |
| provider_mismatch, amount_mismatch,      | accept_record: the provider's record stands;   |
| statement_contradicts_record,            |   an effect still unknown or awaiting takes    |
| statement_line_removed,                  |   the record's outcome (confirmed with its ref, |
| compensation_failed                      |   or failed), a settled one stays as it is     |
| attempts_exhausted                       | extra_attempt (one more, back to planned, only |
|                                          |   where a retry cannot do it twice), or cancel |
| manual_execution                         | confirm (done by hand, with the ref)           |
| the others (the effect's outcome unknown) | confirm / fail with evidence, retry if safe    |

Why accept_record moves an unknown effect: accepting the provider's record is the operator
saying "this is what happened", which for an effect nobody knows the end of is its outcome. A
settled effect is not moved (the state machine has no way back from a terminal status, and
what the ledger recorded stays in its history): the decision keeps the accepted record.

No retry (nor extra attempt) once a lookup has found the effect at the provider, or while a
mismatch is open: the provider holds it, so sending it again would do it a second time.
"""

from __future__ import annotations

from typing import Any

from ledger.effects.states import Status
from ledger.errors import InvalidTransition, Refused
from ledger.models import Effect, Reason, ReviewItem
from reviews.evidence import FAILED_STATUSES, Evidence

CONFIRM, FAIL, RETRY, COMPENSATE, CANCEL = "confirm", "fail", "retry", "compensate", "cancel"
APPROVE, REJECT = "approve", "reject"
NOT_DUPLICATE, ACCEPT_RECORD, EXTRA_ATTEMPT = "not_duplicate", "accept_record", "extra_attempt"
ACTIONS = (
    CONFIRM,
    FAIL,
    RETRY,
    COMPENSATE,
    CANCEL,
    APPROVE,
    REJECT,
    NOT_DUPLICATE,
    ACCEPT_RECORD,
    EXTRA_ATTEMPT,
)
# What each decision is called on the page (its disclosure, its dialog, the queue's suggestion).
LABELS = {
    CONFIRM: "Confirm",
    FAIL: "Mark failed",
    RETRY: "Retry (same idempotency key)",
    COMPENSATE: "Compensate",
    CANCEL: "Cancel",
    APPROVE: "Approve (four-eyes)",
    REJECT: "Reject (four-eyes)",
    NOT_DUPLICATE: "Not a duplicate: same charge",
    ACCEPT_RECORD: "Provider's record accepted",
    EXTRA_ATTEMPT: "One more attempt",
}
# Decisions that need the operator's evidence (what they checked, and where).
NEEDS_EVIDENCE = frozenset({CONFIRM, FAIL, NOT_DUPLICATE, ACCEPT_RECORD})
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
# The open item's reasons each new kind closes.
_CLOSES: dict[str, frozenset[str]] = {
    NOT_DUPLICATE: frozenset({Reason.DUPLICATE}),
    ACCEPT_RECORD: MISMATCH_REASONS,
    EXTRA_ATTEMPT: frozenset({Reason.ATTEMPTS_EXHAUSTED}),
}
_UNSETTLED = frozenset({Status.UNKNOWN, Status.AWAITING_CONFIRMATION})


class RetryUnsafe(Refused):
    code = "retry_unsafe"


class DoesNotApply(Refused):
    """The decision closes another kind of review item than the one open."""

    code = "does_not_apply"


class RecordFound(Refused):
    code = "record_found"


class MismatchOpen(Refused):
    code = "mismatch_open"


class NoRecord(Refused):
    code = "no_provider_record"


class ClaimedByOther(Refused):
    code = "claimed_by_other"


def refusal(
    effect: Effect, item: ReviewItem | None, action: str, evidence: Evidence, ground: str
) -> Refused | None:
    """Why `action` does not apply to `effect` with `item` open, or None when it does. Pure:
    the caller reads the evidence and the retry ground (`ledger.effects.recovery.retry_ground`)."""
    reason = item.reason if item is not None else ""
    if action in _CLOSES and reason not in _CLOSES[action]:
        return DoesNotApply(
            f"“{LABELS[action]}” closes a {' or '.join(sorted(_CLOSES[action]))} review item; "
            f"this effect has {reason or 'no open item'}.",
            reason=reason,
        )
    if action in (RETRY, EXTRA_ATTEMPT):
        if evidence.found_ref:
            return RecordFound(
                f"The provider's lookup found it ({evidence.found_ref}): sending it again would "
                "do it a second time. Confirm it, or accept the provider's record.",
                provider_ref=evidence.found_ref,
            )
        if reason in MISMATCH_REASONS:
            return MismatchOpen(
                "The provider holds a record of it that differs from ours: sending it again "
                "would do it a second time. Accept the provider's record, or mark it failed.",
            )
    if action == EXTRA_ATTEMPT:
        if effect.status not in (Status.UNKNOWN, Status.PLANNED):
            return InvalidTransition(
                f"An effect in {effect.status} cannot be given another attempt.",
                status=effect.status,
            )
        if effect.attempt < effect.max_attempts:
            return DoesNotApply(
                f"Attempts remain ({effect.attempt} of {effect.max_attempts}): retry instead.",
            )
        # A planned effect was never sent (or proven not received): claiming it again is safe.
        if effect.status == Status.UNKNOWN and not ground:
            return RetryUnsafe(
                "Another attempt could do this a second time: the provider does not honour the "
                "key (or has forgotten it) and has not said it never received it.",
            )
    if action == ACCEPT_RECORD and effect.status in _UNSETTLED and not evidence.record:
        return NoRecord(
            "No provider record is kept for this effect: confirm or mark it failed instead.",
        )
    return None


def claim_refusal(item: ReviewItem | None, user: Any, over_claim: bool) -> ClaimedByOther | None:
    """Deciding on an item another operator holds needs their say-so: the asker must say they
    decide over the claim (the page's dialog asks)."""
    if item is None or item.assignee_id is None or item.assignee_id == user.pk or over_claim:
        return None
    return ClaimedByOther(
        f"{claim_text(item)}: decide over their claim only once you have confirmed it.",
        claimed_by=item.assignee.get_username(),
        claimed_at=item.claimed_at.isoformat() if item.claimed_at else None,
    )


def claim_text(item: ReviewItem) -> str:
    """ "olga is working on this since 10:02" (or without the time: an item assigned before
    claims were timed)."""
    since = item.claimed_at
    text = f"{item.assignee.get_username()} is working on this"
    return f"{text} since {since:%H:%M}" if since else text


def accepted_outcome(effect: Effect, evidence: Evidence) -> Status | None:
    """Where accepting the provider's record moves the effect: its outcome while it has none."""
    if effect.status not in _UNSETTLED or not evidence.record:
        return None
    return Status.FAILED if evidence.record_status in FAILED_STATUSES else Status.CONFIRMED
