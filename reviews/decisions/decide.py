"""Taking a decision: the operator's ask checked, carried out and recorded.

A decision is its own effect (kind `decision`, status `confirmed`, `parent` = the target) and is
recorded in ONE transaction with the target's transition and the review item's resolution
(docs/concepts.md#review-and-escalation). When two operators decide on one effect at once, exactly
one decision commits: the loser's transaction fails on the target's version check, on the
decision's unique `effect_key` or on the review item that is no longer open, rolls back whole,
and the loser is told who won. Provider work a decision causes (a refund) runs after commit.

What each kind does is its declaration (`reviews.decisions.kinds`); which kind applies where is
`reviews.decisions.offer`; four-eyes is `reviews.decisions.approvals` (an effect above its
approval threshold, or a retry another operator proposed on nothing but their word that the
provider never received it). An item another operator holds (`reviews.queue.holds`) is decided
on only when the asker says so (`Ask.over_hold`).

Who decides is checked here, first, whoever calls and through whichever channel (the page, a bulk
job, Slack, an email link, the operator API, `manage.py decide`): the person must be active and
an operator (or an admin) as the database has them at that moment
(`reviews.access.checks.acts_now`), else `NotAnOperator` (a 403 with the code `not_an_operator`).
Then teams (ADR 0014), whoever calls: a person decides only on effects of
their teams or of no team, by their teams as the database has them at that moment
(`reviews.access.teams.decides_on`), so a page, a background bulk job or any later path that
forgets to look refuses the same (`OutsideTeams`, a 403 with the code `outside_teams`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from ledger.effects.decision_records import record_decision, resolve_review
from ledger.effects.recovery import VERIFIED_ABSENT
from ledger.effects.transitions import Superseded
from ledger.errors import AttemptsExhausted, InvalidTransition, ValidationFailed
from ledger.models import Effect, RetryProposal, ReviewItem
from ledger.models.states import Kind, Status
from ledger.policy.tools import policy_for
from reviews.access.checks import acts_now
from reviews.access.teams import decides_on
from reviews.decisions.approvals import (
    check_second_pair,
    close_proposal,
    pending_proposal,
    supersede_stale,
)
from reviews.decisions.declaration import Action, Ask, Carried, Carrying, DecisionKind
from reviews.decisions.evidence import Evidence, evidence_of
from reviews.decisions.grounds import resend_ground
from reviews.decisions.kinds import ACTIONS, KINDS
from reviews.decisions.offer import open_item, refusal
from reviews.decisions.refusals import AlreadyDecided, NotAnOperator, OutsideTeams, RetryUnsafe
from reviews.queue.holds import hold_refusal

__all__ = ["AlreadyDecided", "Ask", "Decided", "NotAnOperator", "OutsideTeams", "decide"]

# How the decision effect names a retry that waits for a second operator.
PROPOSE_RETRY = "propose_retry"
# What a kind's required field says when it is empty.
_MISSING = {
    "provider_ref": "the provider's reference for what was done",
    "evidence": "what shows it (a provider record, a support reply)",
}


@dataclass
class Decided:
    decision: Effect
    target: Effect
    # The compensation a `compensate` decision created.
    follow_up: Effect | None = None


@dataclass(frozen=True)
class _Checked:
    """A decision that passed every check, with what its transaction needs."""

    target: Effect
    kind: DecisionKind
    open_item: ReviewItem | None
    evidence: Evidence
    # The retry proposal a four-eyes decision approves or rejects.
    proposal: RetryProposal | None
    ground: str

    @property
    def proposing(self) -> bool:
        """Only the operator's word that it never arrived: a second operator must confirm
        the retry, which is recorded as a proposal and not carried out."""
        return self.kind.action == Action.RETRY and self.ground == VERIFIED_ABSENT

    @property
    def settles(self) -> bool:
        """Whether the decision closes the open item: proposing or rejecting a retry leaves
        the effect unknown, and its review item open."""
        rejects_proposal = self.kind.action == Action.REJECT and self.proposal is not None
        return not self.proposing and not rejects_proposal


def decide(effect_id: Any, ask: Ask, *, user: User) -> Decided:
    """Record `ask` as a decision on the effect. Raises `NotAnOperator` (403: the person is
    deactivated or no longer an operator), `OutsideTeams` (403: not the person's teams'
    effect), `ValidationFailed`, a `Refused` (409, with a reason code) or `AlreadyDecided`
    (someone else won)."""
    if not acts_now(user):
        raise NotAnOperator(
            f"{user.get_username()} may not decide: the account is deactivated, or no longer "
            "has the operator role."
        )
    target = Effect.objects.select_related("agent").get(pk=effect_id)
    if not decides_on(user, target.pk):
        raise OutsideTeams(
            f"{user.get_username()} is not in the team this effect belongs to: only its own "
            "team's operators (or an admin) decide on it."
        )
    kind = _validate(ask)
    if target.version != ask.expected_version:
        raise _lost(target, ask.expected_version)
    _check_status(target, kind)
    item = open_item(target)
    if (held := hold_refusal(item, user, ask.over_hold)) is not None:
        raise held
    evidence = evidence_of(target.id)
    proposal = check_second_pair(target, user) if kind.four_eyes else None
    ground = _ground(target, ask, evidence, proposal)
    if (refused := refusal(target, item, ask.action, evidence, ground)) is not None:
        raise refused
    checked = _Checked(target, kind, item, evidence, proposal, ground)
    try:
        decision, carried = _commit(checked, ask, user)
    except (Superseded, IntegrityError):  # IntegrityError: another proposal came first
        raise _lost(Effect.objects.get(pk=target.pk), ask.expected_version) from None
    return Decided(decision=decision, target=carried.moved, follow_up=carried.follow_up)


def _validate(ask: Ask) -> DecisionKind:
    """The kind asked for, once the ask has everything that kind needs."""
    kind = KINDS.get(ask.action)
    problems: dict[str, str] = {}
    if kind is None:
        problems["action"] = f"one of {', '.join(ACTIONS)}"
    if not ask.reason.strip():
        problems["reason"] = "every decision needs a reason"
    shown = kind.fields if kind is not None else ()
    for name in shown:
        if name in kind.required and not getattr(ask, name).strip():
            problems[name] = _MISSING[name]
    if "verified_absent" in shown and ask.verified_absent and not ask.evidence.strip():
        problems["evidence"] = "what shows the provider never received it"
    if problems:
        raise ValidationFailed("The decision is incomplete.", problems)
    return kind


def _check_status(target: Effect, kind: DecisionKind) -> None:
    if target.kind == Kind.DECISION:
        raise InvalidTransition("A decision is final; it cannot itself be decided on.")
    if not kind.starts_from(target):
        raise InvalidTransition(
            f"An effect in {target.status} cannot be {kind.past}.", status=target.status
        )


def _ground(target: Effect, ask: Ask, evidence: Evidence, proposal: RetryProposal | None) -> str:
    """Why sending the effect again cannot do it twice, where the decision sends it again: a
    retry (one at a time, within its attempts, refused where it could do it twice), a retry
    proposal approved, one more attempt. "" where nothing is sent again."""
    ground = VERIFIED_ABSENT if proposal is not None else ""
    if ask.action == Action.RETRY and pending_proposal(target) is not None:
        raise InvalidTransition(
            "A retry is already proposed: another operator approves or rejects it.",
            status=target.status,
        )
    if ask.action in (Action.RETRY, Action.APPROVE) and target.status == Status.UNKNOWN:
        if target.attempt >= target.max_attempts:
            raise AttemptsExhausted(
                f"All {target.max_attempts} attempts have been used; confirm, mark failed or "
                "compensate instead.",
                attempt=target.attempt,
                max_attempts=target.max_attempts,
            )
        verified_absent = ask.verified_absent or proposal is not None
        ground = resend_ground(target, evidence, verified_absent=verified_absent)
        if not ground:
            raise RetryUnsafe(
                "A retry could do this a second time: the provider does not honour the key "
                "(or its memory of it has expired) and has not said it never received it. "
                "Check with the provider and record what you found, or confirm / mark failed.",
            )
    if KINDS[ask.action].grounded:
        ground = resend_ground(target, evidence)
    return ground


def _commit(checked: _Checked, ask: Ask, user: User) -> tuple[Effect, Carried]:
    """The decision's one transaction: the kind carried out (not for a proposal), the item
    resolved, the proposal closed, the decision recorded. Raises `Superseded` (or an
    `IntegrityError`) when another decision came first."""
    target = checked.target
    actor = f"operator:{user.get_username()}"
    decision_id = uuid.uuid4()
    item = checked.open_item if checked.settles else None
    with transaction.atomic():
        if checked.proposing:
            carried = Carried(target)
        else:
            carried = checked.kind.carry_out(_carrying(checked, ask, actor, decision_id))
        summary = _summary(ask, checked.kind)
        if item is not None and not resolve_review(
            item, decision_id=decision_id, user=user, summary=summary
        ):
            raise Superseded(target.id)
        outcome = "confirmed" if ask.action == Action.APPROVE else "rejected"
        if checked.proposal is not None and not close_proposal(
            checked.proposal, user=user, outcome=outcome
        ):
            raise Superseded(target.id)
        decision = _record(checked, carried, ask, user, actor, decision_id)
        if decision is None:
            raise Superseded(target.id)
        if checked.proposing:
            supersede_stale(target)
            RetryProposal.objects.create(
                effect=target,
                proposed_by=user,
                proposal=decision,
                evidence=ask.evidence,
                effect_version=target.version,
            )
    return decision, carried


def _carrying(checked: _Checked, ask: Ask, actor: str, decision_id: uuid.UUID) -> Carrying:
    """What the kind's carry-out is given: the reason and the event's data redacted by the
    tool's policy."""
    policy = policy_for(checked.target.tool)
    redact = policy.redactor
    data = redact(
        {
            "decision": str(decision_id),
            "evidence": ask.evidence,
            "provider_ref": ask.provider_ref,
            "ground": checked.ground,
        }
    )
    return Carrying(
        target=checked.target,
        ask=ask,
        policy=policy,
        actor=actor,
        decision_id=decision_id,
        ground=checked.ground,
        evidence=checked.evidence,
        open_item=checked.open_item,
        reason=redact.text(ask.reason)[:2000],
        data=data,
    )


def _record(
    checked: _Checked,
    carried: Carried,
    ask: Ask,
    user: User,
    actor: str,
    decision_id: uuid.UUID,
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
        # Stored under the name decisions were first recorded with, as exports read it.
        "over_claim": ask.over_hold,
    }
    if "compensation_request" in checked.kind.fields:
        asked["compensation_tool"] = ask.compensation_tool
        asked["compensation_request"] = ask.compensation_request
    follow_up = carried.follow_up
    return record_decision(
        checked.target,
        carried.moved,
        action=PROPOSE_RETRY if checked.proposing else ask.action,
        reason=ask.reason,
        asked=asked,
        actor=actor,
        details={
            "user_id": user.pk,
            "channel": ask.channel,
            **({"via": ask.via} if ask.via else {}),
            "evidence": ask.evidence,
            "ground": checked.ground,
            "compensation": str(follow_up.id) if follow_up else None,
            **carried.details,
        },
        review=checked.open_item if checked.settles else None,
        decision_id=decision_id,
    )


def _summary(ask: Ask, kind: DecisionKind) -> str:
    text = f"{ask.action}: {ask.reason}"
    if "provider_ref" in kind.required:
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
