"""What waits for a second operator (four-eyes, `reviews.decisions.approvals`), as the approvals
page lists it and every page's banner counts it.

Two kinds wait: effects held in `awaiting_approval` (above their tool's `approve_above`) and
retries proposed on an operator's word alone (a pending `RetryProposal`). Each row says who
asked, since when and for how much. Who asked is read in the same query as the rows (the intent
event's actor as a subquery), not once per row; a row says when the person looking is the one
who asked, since `reviews.decisions.approvals.check_second_pair` will refuse them. Only the
effects of the person's teams are listed and counted (ADR 0014).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, OuterRef, QuerySet, Subquery

from ledger.models import Effect, EffectEvent, EventKind, RetryProposal
from ledger.models.states import Status
from ledger.policy.iso4217 import major_units
from reviews.access.counts import summary_for
from reviews.access.teams import Person, visible_effects
from reviews.decisions.approvals import is_asker


@dataclass(frozen=True)
class Waiting:
    effect: Effect
    what: str
    asked_by: str  # "agent shop-bot", "operator olga"
    asker: str  # the operator's username, "" for an agent: who may not approve
    mine: bool  # the person looking asked for it (through this account or another of theirs)
    asked_at: datetime
    amount: str
    grounds: str


def pending_effects() -> QuerySet[Effect]:
    """Effects waiting for four-eyes approval, with the actor of their intent as `asker`."""
    intent_actor = (
        EffectEvent.objects.filter(effect=OuterRef("pk"), kind=EventKind.INTENT)
        .order_by("id")
        .values("actor")[:1]
    )
    return (
        Effect.objects.filter(status=Status.AWAITING_APPROVAL)
        .select_related("agent")
        .annotate(asker=Subquery(intent_actor))
        .order_by("created_at")
    )


def pending_proposals() -> QuerySet[RetryProposal]:
    """Retry proposals still waiting; one made before its effect last moved no longer counts
    (the rule of `reviews.decisions.approvals.pending_proposal`, for many effects at once)."""
    return (
        RetryProposal.objects.filter(decided_at__isnull=True, effect_version=F("effect__version"))
        .select_related("effect", "effect__agent", "proposed_by")
        .order_by("proposed_at")
    )


def _amount(effect: Effect) -> str:
    if effect.amount_minor is None or not effect.currency:
        return "—"
    return major_units(effect.amount_minor, effect.currency)


def _held(effect: Effect, user: Person) -> Waiting:
    kind, _, name = (effect.asker or "agent:").partition(":")
    asker = name if kind == "operator" else ""
    return Waiting(
        effect=effect,
        what="above the approval threshold",
        asked_by=f"{kind} {name or effect.agent.name}",
        asker=asker,
        mine=is_asker(asker, user),
        asked_at=effect.created_at,
        amount=_amount(effect),
        grounds=f"{effect.tool} for {effect.target or 'no target'}",
    )


def _proposed(proposal: RetryProposal, user: Person) -> Waiting:
    username = proposal.proposed_by.get_username()
    return Waiting(
        effect=proposal.effect,
        what="retry on an operator's word",
        asked_by=f"operator {username}",
        asker=username,
        mine=is_asker(username, user),
        asked_at=proposal.proposed_at,
        amount=_amount(proposal.effect),
        grounds=proposal.evidence,
    )


def waiting(user: Person, shown: int) -> tuple[list[Waiting], bool]:
    """What waits, oldest first, at most `shown` of each kind; and whether more wait than that
    (more than a page of them is an incident of its own)."""
    held = list(visible_effects(user, pending_effects())[: shown + 1])
    proposed = list(visible_effects(user, pending_proposals(), "effect__")[: shown + 1])
    rows = [_held(e, user) for e in held[:shown]] + [_proposed(p, user) for p in proposed[:shown]]
    return sorted(rows, key=lambda w: w.asked_at), len(held) > shown or len(proposed) > shown


def waiting_count(user: Person) -> int:
    """How many effects and retry proposals wait, of the teams `user` sees. The effects are
    counted from the ledger's summary (`ledger.overview.summary`, refreshed every few seconds by
    a thread; per team in `reviews.access.counts`), not by a count over the effects on every
    page; the proposals are few and indexed."""
    held = sum(
        n
        for (_, _, _, status), n in summary_for(user).effect_counts.items()
        if status == Status.AWAITING_APPROVAL
    )
    return held + visible_effects(user, pending_proposals(), "effect__").count()
