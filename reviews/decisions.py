"""Operator decisions: confirm, mark failed, retry, compensate, cancel; the ones that close an
item with nothing to do at the provider (not a duplicate, the provider's record accepted), one
more attempt; and the four-eyes ones,
approve and reject (`reviews.approvals`: an effect above its approval threshold, or a retry
another operator proposed on nothing but their word that the provider never received it).

A decision is its own effect (kind `decision`, status `confirmed`, `parent` = the target) and is
recorded in ONE transaction with the target's transition and the review item's resolution
(docs/concepts.md#review-and-escalation). When two operators decide on one effect at once, exactly
one decision commits: the loser's transaction fails on the target's version check, on the
decision's unique `effect_key` or on the review item that is no longer open, rolls back whole,
and the loser is told who won. Provider work a decision causes (a refund) runs after commit.

Which kind applies where is `reviews.decision_kinds`; an item another operator has claimed is
decided on only when the asker says so (`Ask.over_claim`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from ledger.containment.reviewqueue import open_review
from ledger.effects.compensation import compensate
from ledger.effects.decision_records import grant_attempt, record_decision, resolve_review
from ledger.effects.recovery import VERIFIED_ABSENT, database_now, retry_ground
from ledger.effects.states import Kind, Status
from ledger.effects.transitions import SqlExpr, Superseded, transition
from ledger.errors import AttemptsExhausted, InvalidTransition, Refused, ValidationFailed
from ledger.models import Effect, Reason, RetryProposal, ReviewItem
from ledger.policy.tools import Policy, policy_for
from reconcilers.execution import can_execute, execute_after_commit
from reviews import decision_kinds as kinds
from reviews.approvals import (
    check_second_pair,
    close_proposal,
    pending_proposal,
    supersede_stale,
    waits_for_second_pair,
)
from reviews.decision_kinds import (
    ACCEPT_RECORD,
    ACTIONS,
    APPROVE,
    CANCEL,
    COMPENSATE,
    CONFIRM,
    EXTRA_ATTEMPT,
    FAIL,
    LABELS,
    NEEDS_EVIDENCE,
    NOT_DUPLICATE,
    REJECT,
    RETRY,
    RetryUnsafe,
)
from reviews.evidence import Evidence, evidence_of

__all__ = [
    "ACCEPT_RECORD",
    "ACTIONS",
    "APPROVE",
    "CANCEL",
    "COMPENSATE",
    "CONFIRM",
    "EXTRA_ATTEMPT",
    "FAIL",
    "LABELS",
    "NOT_DUPLICATE",
    "REJECT",
    "RETRY",
    "AlreadyDecided",
    "Ask",
    "Decided",
    "RetryUnsafe",
    "allowed_actions",
    "decide",
]
_ANY = frozenset(Status)
# How the decision effect names a retry that waits for a second operator.
PROPOSE_RETRY = "propose_retry"

# Which statuses each action may start from (the state machine decides the rest).
_FROM: dict[str, frozenset[Status]] = {
    CONFIRM: frozenset({Status.UNKNOWN, Status.AWAITING_CONFIRMATION}),
    FAIL: frozenset({Status.UNKNOWN, Status.AWAITING_CONFIRMATION}),
    RETRY: frozenset({Status.UNKNOWN}),
    COMPENSATE: frozenset({Status.CONFIRMED}),
    CANCEL: frozenset({Status.PLANNED}),
    # From unknown only while a retry proposal waits (`reviews.approvals` checks).
    APPROVE: frozenset({Status.AWAITING_APPROVAL, Status.UNKNOWN}),
    REJECT: frozenset({Status.AWAITING_APPROVAL, Status.UNKNOWN}),
    # These close an item whatever the effect's status (`reviews.decision_kinds` says which).
    NOT_DUPLICATE: _ANY,
    ACCEPT_RECORD: _ANY,
    EXTRA_ATTEMPT: frozenset({Status.UNKNOWN, Status.PLANNED}),
}


class AlreadyDecided(Refused):
    """Someone else decided (or the effect moved) since the operator looked at it."""

    code = "already_decided"


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
    # The asker decides although another operator has claimed the item.
    over_claim: bool = False


@dataclass
class Decided:
    decision: Effect
    target: Effect
    # The compensation a `compensate` decision created.
    follow_up: Effect | None = None


def allowed_actions(
    effect: Effect,
    user: User | None = None,
    *,
    item: ReviewItem | None = None,
    evidence: Evidence | None = None,
) -> list[str]:
    """The actions the page offers for this effect to `user` (the domain checks again on
    submit): approve and reject only where something waits for them, and not to the operator
    who asked for it; the others where `reviews.decision_kinds` lets them apply to the open
    `item` (read here when not given) and the provider's `evidence`."""
    if effect.kind == Kind.DECISION:
        return []
    actions = [a for a in ACTIONS if effect.status in _FROM[a] and a not in (APPROVE, REJECT)]
    waits, asker = waits_for_second_pair(effect)
    if waits:
        if RETRY in actions:
            actions.remove(RETRY)  # one proposal at a time
        if user is None or user.get_username() != asker:
            actions += [APPROVE, REJECT]
    if _manual_compensation(effect):
        actions.append(CONFIRM)
    if RETRY in actions and effect.attempt >= effect.max_attempts:
        actions.remove(RETRY)
    if item is None:
        item = _open_item(effect)
    evidence = evidence if evidence is not None else evidence_of(effect.id)
    ground = _ground(effect, evidence) if EXTRA_ATTEMPT in actions else ""
    return [a for a in actions if kinds.refusal(effect, item, a, evidence, ground) is None]


def _open_item(effect: Effect) -> ReviewItem | None:
    return (
        ReviewItem.objects.select_related("assignee")
        .filter(effect=effect, resolved_at__isnull=True)
        .first()
    )


def _ground(effect: Effect, evidence: Evidence, *, verified_absent: bool = False) -> str:
    """Why sending the effect again cannot do it twice ("" when it could): a planned effect
    was never sent; otherwise the one rule, `ledger.effects.recovery.retry_ground`."""
    if effect.status == Status.PLANNED:
        return "planned"
    return retry_ground(
        effect,
        policy_for(effect.tool),
        now=database_now(),
        last_lookup=evidence.lookup_outcome,
        verified_absent=verified_absent,
    )


def decide(effect_id: Any, ask: Ask, *, user: User) -> Decided:
    """Record `ask` as a decision on the effect. Raises `ValidationFailed`, a `Refused`
    (409, with a reason code) or `AlreadyDecided` (someone else won)."""
    target = Effect.objects.select_related("agent").get(pk=effect_id)
    _validate(target, ask)
    if target.version != ask.expected_version:
        raise _lost(target, ask.expected_version)
    _check_status(target, ask)
    open_item = _open_item(target)
    if (claimed := kinds.claim_refusal(open_item, user, ask.over_claim)) is not None:
        raise claimed
    evidence = evidence_of(target.id)
    proposal = check_second_pair(target, user) if ask.action in (APPROVE, REJECT) else None
    policy = policy_for(target.tool)
    ground = VERIFIED_ABSENT if proposal is not None else ""
    if ask.action == RETRY and pending_proposal(target) is not None:
        raise InvalidTransition(
            "A retry is already proposed: another operator approves or rejects it.",
            status=target.status,
        )
    if ask.action in (RETRY, APPROVE) and target.status == Status.UNKNOWN:
        if target.attempt >= target.max_attempts:
            raise AttemptsExhausted(
                f"All {target.max_attempts} attempts have been used; confirm, mark failed or "
                "compensate instead.",
                attempt=target.attempt,
                max_attempts=target.max_attempts,
            )
        ground = _ground(
            target, evidence, verified_absent=ask.verified_absent or proposal is not None
        )
        if not ground:
            raise RetryUnsafe(
                "A retry could do this a second time: the provider does not honour the key "
                "(or its memory of it has expired) and has not said it never received it. "
                "Check with the provider and record what you found, or confirm / mark failed.",
            )
    if ask.action == EXTRA_ATTEMPT:
        ground = _ground(target, evidence)
    if (refused := kinds.refusal(target, open_item, ask.action, evidence, ground)) is not None:
        raise refused
    # Only the operator's word that it never arrived: a second operator must confirm the retry.
    proposing = ask.action == RETRY and ground == VERIFIED_ABSENT
    # Proposing or rejecting a retry leaves the effect unknown: its review item stays open.
    settles = not proposing and not (ask.action == REJECT and proposal is not None)
    actor = f"operator:{user.get_username()}"
    decision_id = uuid.uuid4()
    try:
        with transaction.atomic():
            moved, follow_up = (
                (target, None)
                if proposing
                else _carry_out(
                    target, ask, policy, actor, decision_id, ground, evidence, open_item
                )
            )
            if (
                settles
                and open_item is not None
                and not resolve_review(
                    open_item, decision_id=decision_id, user=user, summary=_summary(ask)
                )
            ):
                raise Superseded(target.id)
            if proposal is not None and not close_proposal(
                proposal, user=user, outcome="confirmed" if ask.action == APPROVE else "rejected"
            ):
                raise Superseded(target.id)
            decision = _record(
                decision_id,
                target,
                moved,
                ask,
                user,
                actor,
                ground,
                open_item if settles else None,
                follow_up,
                action=PROPOSE_RETRY if proposing else ask.action,
                evidence=evidence,
            )
            if decision is None:
                raise Superseded(target.id)
            if proposing:
                supersede_stale(target)
                RetryProposal.objects.create(
                    effect=target,
                    proposed_by=user,
                    proposal=decision,
                    evidence=ask.evidence,
                    effect_version=target.version,
                )
    except (Superseded, IntegrityError):  # IntegrityError: another proposal came first
        raise _lost(Effect.objects.get(pk=target.pk), ask.expected_version) from None
    if follow_up is not None and can_execute(follow_up.tool) and ask.action == COMPENSATE:
        execute_after_commit(follow_up.id)
    return Decided(decision=decision, target=moved, follow_up=follow_up)


def _validate(target: Effect, ask: Ask) -> None:
    problems: dict[str, str] = {}
    if ask.action not in ACTIONS:
        problems["action"] = f"one of {', '.join(ACTIONS)}"
    if not ask.reason.strip():
        problems["reason"] = "every decision needs a reason"
    if ask.action == CONFIRM and not ask.provider_ref.strip():
        problems["provider_ref"] = "the provider's reference for what was done"
    if ask.action in NEEDS_EVIDENCE and not ask.evidence.strip():
        problems["evidence"] = "what shows it (a provider record, a support reply)"
    if ask.action == RETRY and ask.verified_absent and not ask.evidence.strip():
        problems["evidence"] = "what shows the provider never received it"
    if problems:
        raise ValidationFailed("The decision is incomplete.", problems)


def _check_status(target: Effect, ask: Ask) -> None:
    if target.kind == Kind.DECISION:
        raise InvalidTransition("A decision is final; it cannot itself be decided on.")
    if target.status not in _FROM[ask.action] and not (
        ask.action == CONFIRM and _manual_compensation(target)
    ):
        raise InvalidTransition(
            f"An effect in {target.status} cannot be {_PAST[ask.action]}.", status=target.status
        )


def _manual_compensation(effect: Effect) -> bool:
    """A compensation nobody can execute automatically waits, planned, for a person to carry it
    out and confirm it."""
    return (
        effect.kind == Kind.COMPENSATION
        and effect.status == Status.PLANNED
        and not can_execute(effect.tool)
    )


_PAST = {
    NOT_DUPLICATE: "closed as not a duplicate",
    ACCEPT_RECORD: "settled by the provider's record",
    EXTRA_ATTEMPT: "given another attempt",
    CONFIRM: "confirmed",
    FAIL: "marked failed",
    RETRY: "retried",
    COMPENSATE: "compensated",
    CANCEL: "cancelled",
    APPROVE: "approved",
    REJECT: "rejected",
}


def _carry_out(
    target: Effect,
    ask: Ask,
    policy: Policy,
    actor: str,
    decision_id: uuid.UUID,
    ground: str,
    evidence: Evidence,
    open_item: ReviewItem | None,
) -> tuple[Effect, Effect | None]:
    """The target's side of the decision, inside the decision's transaction."""
    redact = policy.redactor
    data = redact(
        {
            "decision": str(decision_id),
            "evidence": ask.evidence,
            "provider_ref": ask.provider_ref,
            "ground": ground,
        }
    )
    reason = redact.text(ask.reason)[:2000]
    if ask.action == NOT_DUPLICATE:
        return target, None  # one charge after all: the item closes, nothing moves
    if ask.action == ACCEPT_RECORD:
        outcome = kinds.accepted_outcome(target, evidence)
        if outcome is None:
            return target, None  # settled already: the decision keeps the accepted record
        changes = {"provider_ref": redact.text(evidence.record_ref)} if evidence.record_ref else {}
        data["accepted_record_event"] = evidence.record.id if evidence.record else None
        moved = transition(target, outcome, actor=actor, reason=reason, changes=changes, data=data)
        return moved, None
    if ask.action == EXTRA_ATTEMPT:
        if target.status == Status.PLANNED:
            return grant_attempt(target, actor=actor, reason=reason, data=data), None
        changes = {
            "max_attempts": SqlExpr("max_attempts + 1"),
            "next_check_at": None,
            "checks": 0,
            "confirm_deadline": None,
        }
        return transition(
            target, Status.PLANNED, actor=actor, reason=reason, changes=changes, data=data
        ), None
    if ask.action == CONFIRM:
        if target.status == Status.PLANNED:
            # Carried out by hand: the operator held it (one attempt), then reports it done.
            target = transition(
                target,
                Status.DISPATCHING,
                actor=actor,
                reason="operator_executed",
                changes={"attempt": SqlExpr("attempt + 1"), "lease_owner": actor},
                where=[("attempt < max_attempts", [])],
                data={"decision": str(decision_id)},
            )
        changes = {"provider_ref": redact.text(ask.provider_ref.strip())}
        return transition(
            target, Status.CONFIRMED, actor=actor, reason=reason, changes=changes, data=data
        ), None
    if ask.action == FAIL:
        return transition(target, Status.FAILED, actor=actor, reason=reason, data=data), None
    if ask.action == CANCEL or (ask.action == REJECT and target.status != Status.UNKNOWN):
        return transition(target, Status.CANCELLED, actor=actor, reason=reason, data=data), None
    if ask.action == REJECT:
        return target, None  # a rejected retry proposal: the effect stays unknown
    if ask.action == APPROVE and target.status == Status.AWAITING_APPROVAL:
        moved = transition(target, Status.PLANNED, actor=actor, reason=reason, data=data)
        if moved.kind == Kind.COMPENSATION and can_execute(moved.tool):
            execute_after_commit(moved.id)  # an operator's refund above the threshold
        return moved, None
    if ask.action in (RETRY, APPROVE):
        changes = {"next_check_at": None, "checks": 0, "confirm_deadline": None}
        moved = transition(
            target,
            Status.PLANNED,
            actor=actor,
            reason=reason,
            changes=changes,
            where=[("attempt < max_attempts", [])],
            data=data,
        )
        if moved.kind == Kind.COMPENSATION and can_execute(moved.tool):
            execute_after_commit(moved.id)
        return moved, None
    compensation, _ = compensate(
        target.agent,
        target,
        tool=ask.compensation_tool or None,
        request=ask.compensation_request,
        reason=reason,
        compensation_key=f"decision-{decision_id}",
        actor=actor,
        force=ask.force,
        operator=True,
        # Compensating on a duplicate item refunds the provider's second charge, not the first.
        duplicate=open_item is not None and open_item.reason == Reason.DUPLICATE,
    )
    if not can_execute(compensation.tool):
        open_review(compensation.id, Reason.MANUAL_EXECUTION)
    return target, compensation


def _record(
    decision_id: uuid.UUID,
    before: Effect,
    after: Effect,
    ask: Ask,
    user: User,
    actor: str,
    ground: str,
    review: ReviewItem | None,
    follow_up: Effect | None,
    *,
    action: str,
    evidence: Evidence,
) -> Effect | None:
    """The operator's ask as a decision effect; None when another decision took its key."""
    asked = {
        "action": ask.action,
        "reason": ask.reason,
        "evidence": ask.evidence,
        "provider_ref": ask.provider_ref,
        "verified_absent": ask.verified_absent,
        "force": ask.force,
        "expected_version": ask.expected_version,
        "over_claim": ask.over_claim,
    }
    if ask.action == COMPENSATE:
        asked["compensation_tool"] = ask.compensation_tool
        asked["compensation_request"] = ask.compensation_request
    return record_decision(
        before,
        after,
        action=action,
        reason=ask.reason,
        asked=asked,
        actor=actor,
        details={
            "user_id": user.pk,
            "evidence": ask.evidence,
            "ground": ground,
            "compensation": str(follow_up.id) if follow_up else None,
            **(_accepted(evidence) if ask.action == ACCEPT_RECORD else {}),
        },
        review=review,
        decision_id=decision_id,
    )


def _accepted(evidence: Evidence) -> dict[str, Any]:
    """What an accepted record leaves in the decision: the record itself and where it came
    from (a statement's line has no record event: the evidence text names it)."""
    return {
        "accepted_record": evidence.record_data.get("record"),
        "accepted_record_event": evidence.record.id if evidence.record else None,
    }


def _summary(ask: Ask) -> str:
    text = f"{ask.action}: {ask.reason}"
    if ask.action == CONFIRM:
        text += f" (ref {ask.provider_ref})"
    return text


def _lost(current: Effect, seen_version: int) -> AlreadyDecided:
    """The refusal for an operator who lost the race: who decided, when, and what."""
    latest = (
        Effect.objects.filter(
            parent=current,
            kind=Kind.DECISION,
            provenance__before__version__gte=seen_version,
        )
        .order_by("-created_at")
        .values_list("provenance", "created_at")
        .first()
    )
    if latest is None:
        return AlreadyDecided(
            f"This effect changed since you opened it; it is now {current.status}.",
            status=current.status,
            version=current.version,
        )
    provenance, when = latest
    by = str(provenance.get("actor", "")).removeprefix("operator:")
    return AlreadyDecided(
        f"Already decided by {by} ({provenance.get('action')}); it is now {current.status}.",
        status=current.status,
        version=current.version,
        decided_by=by,
        decided_at=when.isoformat(),
    )
