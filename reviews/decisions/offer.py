"""Which decisions apply where: the kinds the page offers for an effect (`allowed_actions`), and
the rules that refuse a kind where it does not apply (`refusal`; `reviews.decisions.decide`
checks again on submit). What each kind is, and which items it closes, is its declaration
(`reviews.decisions.kinds`); the rules here read it:

- a kind that exists to close one kind of item (`closes_only`) is refused on any other;
- a kind that sends the effect again (`resends`) is refused once a lookup found the effect at
  the provider, or while a mismatch is open: the provider holds it, so sending it again would
  do it a second time;
- then the kind's own check, if it declares one.
"""

from __future__ import annotations

from django.contrib.auth.models import User

from ledger.errors import Refused
from ledger.models import Effect, ReviewItem
from ledger.models.states import Kind
from reviews.decisions.approvals import is_asker, waits_for_second_pair
from reviews.decisions.declaration import MISMATCH_REASONS, Action, by_hand_compensation
from reviews.decisions.evidence import Evidence, evidence_of
from reviews.decisions.grounds import resend_ground
from reviews.decisions.kinds import KINDS
from reviews.decisions.refusals import DoesNotApply, MismatchOpen, RecordFound


def refusal(
    effect: Effect, item: ReviewItem | None, action: str, evidence: Evidence, ground: str
) -> Refused | None:
    """Why `action` does not apply to `effect` with `item` open, or None when it does. Pure:
    the caller reads the evidence and, for a kind that is `grounded`, the resend's ground
    (`reviews.decisions.grounds`)."""
    kind = KINDS[action]
    reason = item.reason if item is not None else ""
    if kind.closes_only and reason not in kind.closes:
        return DoesNotApply(
            f"“{kind.label}” closes a {' or '.join(sorted(kind.closes))} review item; "
            f"this effect has {reason or 'no open item'}.",
            reason=reason,
        )
    if kind.resends:
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
    return kind.check(effect, evidence, ground) if kind.check is not None else None


def allowed_actions(
    effect: Effect,
    user: User | None = None,
    *,
    item: ReviewItem | None = None,
    evidence: Evidence | None = None,
) -> list[Action]:
    """The actions the page offers for this effect to `user`, in the kinds' order (the domain
    checks again on submit): four-eyes kinds only where something waits for them, and not to
    the operator who asked for it; the others where the effect's status lets them start and
    `refusal` lets them apply to the open `item` (read here when not given) and the provider's
    `evidence`."""
    if effect.kind == Kind.DECISION:
        return []
    actions = [a for a, k in KINDS.items() if not k.four_eyes and effect.status in k.from_statuses]
    waits, asker = waits_for_second_pair(effect)
    if waits:
        if Action.RETRY in actions:
            actions.remove(Action.RETRY)  # one proposal at a time
        if user is not None and not is_asker(asker, user):
            actions += [a for a, k in KINDS.items() if k.four_eyes]
    if by_hand_compensation(effect):
        actions += [a for a, k in KINDS.items() if k.by_hand and a not in actions]
    if Action.RETRY in actions and effect.attempt >= effect.max_attempts:
        actions.remove(Action.RETRY)
    if item is None:
        item = open_item(effect)
    evidence = evidence if evidence is not None else evidence_of(effect.id)
    grounded = any(KINDS[a].grounded for a in actions)
    ground = resend_ground(effect, evidence) if grounded else ""
    return [a for a in actions if refusal(effect, item, a, evidence, ground) is None]


def open_item(effect: Effect) -> ReviewItem | None:
    """The effect's open review item (one at most), with its assignee."""
    return (
        ReviewItem.objects.select_related("assignee")
        .filter(effect=effect, resolved_at__isnull=True)
        .first()
    )
