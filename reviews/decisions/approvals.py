"""Four-eyes: what a second operator must approve, and who may be that second operator.

Two things wait for a second pair of eyes (`reviews.decisions.decide` records the decisions):
- an effect in `awaiting_approval` (its amount was above its tool's `approve_above`): approve
  moves it to `planned`, reject to `cancelled`;
- a retry whose only ground is an operator's word that the provider never received the request
  (`ledger.effects.recovery.VERIFIED_ABSENT`, the one rule that judges retry safety): it is recorded
  as a pending `RetryProposal`, the effect stays `unknown`, and approve carries the retry out while
  reject drops it.

Never the one who asked (the agent or operator whose intent it was, or the proposer), and never
an agent: agents have no way to decide at all (decisions are made through operator pages). The
one who asked is a *person*: another account of theirs (a local account and an SSO account that
an admin linked, `reviews.models.Person`) is refused as well (`is_asker`).
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models.functions import Now

from ledger.errors import InvalidTransition, Refused
from ledger.models import Effect, RetryProposal
from ledger.models.states import Status
from ledger.rules.four_eyes import requester
from reviews.sso.people import same_person


class SecondPairNeeded(Refused):
    """The operator asked for this themselves: another operator must decide."""

    code = "four_eyes"


def pending_proposal(effect: Effect) -> RetryProposal | None:
    """The retry proposal waiting on the effect as it is now; one made before the effect last
    moved does not count (`supersede_stale` closes it)."""
    return (
        RetryProposal.objects.filter(
            effect=effect, decided_at__isnull=True, effect_version=effect.version
        )
        .select_related("proposed_by")
        .first()
    )


def supersede_stale(effect: Effect) -> None:
    """Close pending proposals made before the effect last moved, so a new one can be made."""
    RetryProposal.objects.filter(effect=effect, decided_at__isnull=True).exclude(
        effect_version=effect.version
    ).update(decided_at=Now(), outcome="superseded")


def asked_by(effect: Effect, proposal: RetryProposal | None) -> str:
    """The username of the operator who asked for what now waits, or "" for an agent."""
    if proposal is not None:
        return proposal.proposed_by.get_username()
    actor = requester(effect)
    return actor.removeprefix("operator:") if actor.startswith("operator:") else ""


def is_asker(asker: str, user: User | None) -> bool:
    """Whether `user` is the person who asked (`asker`, a username from `asked_by`): the same
    account, or another account of the same person."""
    if not asker or user is None:
        return False
    if asker == user.get_username():
        return True
    account = User.objects.filter(username=asker).first()
    return account is not None and same_person(account, user)


def waits_for_second_pair(effect: Effect) -> tuple[bool, str]:
    """(whether the effect waits for a four-eyes decision, who asked for it)."""
    if effect.status == Status.AWAITING_APPROVAL:
        return True, asked_by(effect, None)
    if effect.status == Status.UNKNOWN:
        proposal = pending_proposal(effect)
        if proposal is not None:
            return True, asked_by(effect, proposal)
    return False, ""


def check_second_pair(effect: Effect, user: User) -> RetryProposal | None:
    """Raise unless `user` may approve or reject what `effect` waits for; returns the pending
    retry proposal, if that is what waits."""
    proposal = pending_proposal(effect) if effect.status == Status.UNKNOWN else None
    if effect.status != Status.AWAITING_APPROVAL and proposal is None:
        raise InvalidTransition(
            f"Nothing waits for approval on this effect (it is {effect.status}).",
            status=effect.status,
        )
    if is_asker(asked_by(effect, proposal), user):
        raise SecondPairNeeded(
            "You asked for this yourself: four-eyes needs another operator to decide.",
            status=effect.status,
        )
    return proposal


def close_proposal(proposal: RetryProposal, *, user: User, outcome: str) -> bool:
    """Mark the proposal decided; False when someone else decided it first."""
    return bool(
        RetryProposal.objects.filter(pk=proposal.pk, decided_at__isnull=True).update(
            decided_at=Now(), decided_by=user, outcome=outcome
        )
    )
