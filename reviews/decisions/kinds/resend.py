"""Sending an effect again under the same idempotency key: *retry* (back to planned, within its
attempts) and *one more attempt* (an exhausted effect gets one attempt more). Both only where a
resend cannot do it twice (`reviews.decisions.grounds`); a retry on nothing but an operator's
word that the provider never received it waits for a second operator
(`reviews.decisions.approvals`), whose approval carries it out (`replan`)."""

from __future__ import annotations

from ledger.effects.decision_records import grant_attempt
from ledger.effects.transitions import SqlExpr, transition
from ledger.errors import InvalidTransition, Refused
from ledger.models import Effect, Reason
from ledger.models.states import Kind, Status
from reconcilers.execution import can_execute, execute_after_commit
from reviews.decisions.declaration import OUTCOME_UNKNOWN, Action, Carried, Carrying, DecisionKind
from reviews.decisions.evidence import Evidence
from reviews.decisions.grounds import resend_ground
from reviews.decisions.refusals import DoesNotApply, RetryUnsafe
from reviews.decisions.whatnext import PERSON, Facts, Line, Preview, base, refused, resend


def _retry_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    if effect.attempt >= effect.max_attempts:
        return refused(effect, action, f"All {effect.max_attempts} attempts have been used.")
    ground = resend_ground(effect, facts.evidence, policy=facts.policy, now=facts.now)
    if ground:
        return resend(effect, facts, action, ground)
    return base(
        effect,
        action,
        effect.status,
        PERSON,
        Line(
            "A resend could do it twice: the provider does not honour the key (or no longer "
            "remembers it) and has not said it never received it."
        ),
        Line(
            "If you record that the provider never received it, a second operator must approve "
            "the retry; until then the effect stays unknown and its review item open."
        ),
        Line("Nothing is sent until then: no money moves."),
    )


def replan(c: Carrying) -> Carried:
    """Back to planned with its checks reset, within its attempts; a compensation the ledger
    sends itself is sent after commit."""
    changes = {"next_check_at": None, "checks": 0, "confirm_deadline": None}
    moved = transition(
        c.target,
        Status.PLANNED,
        actor=c.actor,
        reason=c.reason,
        changes=changes,
        where=[("attempt < max_attempts", [])],
        data=c.data,
    )
    if moved.kind == Kind.COMPENSATION and can_execute(moved.tool):
        execute_after_commit(moved.id)
    return Carried(moved)


def _extra_attempt_preview(effect: Effect, facts: Facts, action: str) -> Preview:
    ground = resend_ground(effect, facts.evidence, policy=facts.policy, now=facts.now)
    if not ground:
        return refused(effect, action, "A resend could do it twice: one more attempt is unsafe.")
    return resend(effect, facts, action, ground, extra_attempt=True)


def _extra_attempt_check(effect: Effect, evidence: Evidence, ground: str) -> Refused | None:
    """Only an effect whose attempts are all used, and only where one more cannot do it twice."""
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
    return None


def _extra_attempt(c: Carrying) -> Carried:
    target = c.target
    if target.status == Status.PLANNED:
        return Carried(grant_attempt(target, actor=c.actor, reason=c.reason, data=c.data))
    changes = {
        "max_attempts": SqlExpr("max_attempts + 1"),
        "next_check_at": None,
        "checks": 0,
        "confirm_deadline": None,
    }
    moved = transition(
        target, Status.PLANNED, actor=c.actor, reason=c.reason, changes=changes, data=c.data
    )
    return Carried(moved)


RETRY = DecisionKind(
    action=Action.RETRY,
    label="Retry (same idempotency key)",
    past="retried",
    question="Retry {key}: back to planned, for its agent to send again under the same key?",
    from_statuses=frozenset({Status.UNKNOWN}),
    key="r",
    fields=("verified_absent", "evidence", "reason"),
    closes=OUTCOME_UNKNOWN,
    preview=_retry_preview,
    carry_out=replan,
    resends=True,
    in_bulk=True,
)

EXTRA_ATTEMPT = DecisionKind(
    action=Action.EXTRA_ATTEMPT,
    label="One more attempt",
    past="given another attempt",
    question="Give {key} one more attempt ({one_more} in all), back to planned?",
    from_statuses=frozenset({Status.UNKNOWN, Status.PLANNED}),
    key="m",
    fields=("reason",),
    closes=frozenset({Reason.ATTEMPTS_EXHAUSTED}),
    closes_only=True,
    preview=_extra_attempt_preview,
    carry_out=_extra_attempt,
    resends=True,
    grounded=True,
    check=_extra_attempt_check,
    in_bulk=True,
)
