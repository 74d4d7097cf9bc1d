"""The approvals page: what waits for a second operator (four-eyes, `reviews.decisions.approvals`).

Two kinds wait: effects held in `awaiting_approval` (above their tool's `approve_above`) and
retries proposed on an operator's word alone (a pending `RetryProposal`). Each row says who
asked, since when and for how much, and links to the effect page where another operator
decides. Who asked is read in the same query as the rows (the intent event's actor as a
subquery), not once per row; the page says when the viewer is the one who asked, since
`reviews.decisions.approvals.check_second_pair` will refuse them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.db.models import F, OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger.containment.iso4217 import major_units
from ledger.effects.states import Status
from ledger.models import Effect, EffectEvent, EventKind, RetryProposal
from reviews.access.checks import reader
from reviews.access.teams import visible_effects
from reviews.decisions.approvals import is_asker

# More than this many waiting is an incident of its own; the page says how many it leaves out.
SHOWN = 200


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


def _held(effect: Effect) -> Waiting:
    kind, _, name = (effect.asker or "agent:").partition(":")
    return Waiting(
        effect=effect,
        what="above the approval threshold",
        asked_by=f"{kind} {name or effect.agent.name}",
        asker=name if kind == "operator" else "",
        mine=False,
        asked_at=effect.created_at,
        amount=_amount(effect),
        grounds=f"{effect.tool} for {effect.target or 'no target'}",
    )


def _proposed(proposal: RetryProposal) -> Waiting:
    username = proposal.proposed_by.get_username()
    return Waiting(
        effect=proposal.effect,
        what="retry on an operator's word",
        asked_by=f"operator {username}",
        asker=username,
        mine=False,
        asked_at=proposal.proposed_at,
        amount=_amount(proposal.effect),
        grounds=proposal.evidence,
    )


@require_GET
@reader
def approvals(request: HttpRequest) -> HttpResponse:
    # Only the teams' effects the person sees (ADR 0014).
    held = list(visible_effects(request.user, pending_effects())[: SHOWN + 1])
    proposed = list(visible_effects(request.user, pending_proposals(), "effect__")[: SHOWN + 1])
    waiting = [_held(e) for e in held[:SHOWN]] + [_proposed(p) for p in proposed[:SHOWN]]
    waiting = [replace(w, mine=is_asker(w.asker, request.user)) for w in waiting]
    context = {
        "waiting": sorted(waiting, key=lambda w: w.asked_at),
        "more": len(held) > SHOWN or len(proposed) > SHOWN,
    }
    return render(request, "reviews/approvals.html", context)
