"""What may be done with an agent's incomplete effects after a restart.

The ledger never re-sends a request itself: it decides what is allowed and the owning agent
re-executes `retry_safe` effects. An expired lease or an `unknown` outcome is decided by what
the tool can do (docs/concepts.md#recovery):

| tool can…                          | then                                          |
| ---------------------------------- | --------------------------------------------- |
| read_only                          | back to planned: retry freely                 |
| has_lookup                         | reconcile: ask the provider before any retry  |
| honours_key (within key_ttl)       | back to planned: the same key cannot duplicate |
| nothing                            | unknown, and a review item at once            |

Whether sending an effect again could do it twice is decided once, by `retry_ground`: this
module's plans and the operators' *Retry* (`reviews.decisions`) both ask it.

`recover` reads only incomplete effects (over `effect_incomplete_idx`, partial on the
incomplete statuses and led by the agent), so what a call costs grows with what is unfinished,
never with the agent's history. It answers a page at a time, most urgent first (`URGENCY`),
then oldest first; the next page starts after the last one's `Position`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Case, Count, IntegerField, Q, QuerySet, Value, When
from django.db.models.functions import Now

from ledger.effects.transitions import Superseded, transition
from ledger.effects.wakeups import wake
from ledger.models import Agent, Effect, EffectEvent, EventKind, Reason, RequestedBy, ReviewItem
from ledger.models.states import INCOMPLETE, Status
from ledger.policy.tools import Policy, policies_for
from ledger.rules.halts import halted_among
from ledger.rules.interlocks import blocked_among
from ledger.rules.reviewqueue import open_review

RETRY_SAFE, RECONCILE, REVIEW, WAIT = "retry_safe", "reconcile", "review", "wait"
# Why a retry under the same idempotency key cannot do the effect twice.
READ_ONLY = "read_only"
HONOURS_KEY = "provider_honours_key"
NOT_FOUND = "provider_not_found"
VERIFIED_ABSENT = "operator_verified_absent"
# Why the agent waits on an effect recorded under it: an operator decided it (a refund).
OPERATOR_DECIDED = "operator_decided"


@dataclass(frozen=True)
class Plan:
    """What may be done with one incomplete effect: the action `/recovery` answers, its reason,
    and what applying it does (a move, a review item)."""

    action: str
    reason: str
    move_to: Status | None = None
    review: Reason | None = None


def _review(reason: Reason, move_to: Status | None = None) -> Plan:
    """A plan that asks a person: `/recovery` answers `review` with the review item's reason."""
    return Plan(REVIEW, reason.value, move_to, reason)


def retry_ground(
    effect: Effect,
    policy: Policy,
    *,
    now: datetime,
    last_lookup: str = "",
    verified_absent: bool = False,
) -> str:
    """Why sending this effect again under the same idempotency key cannot do it a second
    time, or "" when it could. `last_lookup` is the outcome of the latest lookup at the
    provider; `verified_absent` that an operator checked with the provider and recorded it."""
    if policy.read_only:
        return READ_ONLY
    if policy.honours_key and policy.key_ttl and now - effect.created_at < policy.key_ttl:
        return HONOURS_KEY
    if policy.honours_key and last_lookup == "not_found":
        return NOT_FOUND
    if verified_absent:
        return VERIFIED_ABSENT
    return ""


def last_lookup(effect: Effect) -> str:
    """The outcome of the latest lookup at the provider ("" when nobody asked)."""
    return (
        EffectEvent.objects.filter(effect=effect, kind=EventKind.RECONCILIATION)
        .order_by("-id")
        .values_list("reason", flat=True)
        .first()
        or ""
    )


def plan_for(
    effect: Effect, policy: Policy, *, blocked: bool, now: datetime, halted: bool = False
) -> Plan:
    """The allowed action for one incomplete effect. Pure: no queries, no writes. `halted`: an
    active halt covers it (`ledger.containment.halts`), so a planned effect may not be claimed
    now."""
    attempts_left = effect.attempt < effect.max_attempts
    exhausted = _review(Reason.ATTEMPTS_EXHAUSTED)
    if effect.status == Status.PLANNED:
        if halted:
            return Plan(WAIT, "halted")
        if blocked:
            return Plan(WAIT, "blocked")
        return Plan(RETRY_SAFE, "planned") if attempts_left else exhausted
    if effect.status == Status.AWAITING_CONFIRMATION:
        return Plan(WAIT, "awaiting_confirmation")
    if effect.status == Status.AWAITING_APPROVAL:
        return Plan(WAIT, "awaiting_approval")  # an operator decides; nothing to do but wait
    if (
        effect.status == Status.DISPATCHING
        and effect.lease_expires_at
        and effect.lease_expires_at > now
    ):
        return Plan(WAIT, "leased")

    # An expired lease or an unknown outcome: the provider may have done it 0, 1 or n times.
    lost = Status.UNKNOWN if effect.status == Status.DISPATCHING else None
    ground = retry_ground(effect, policy, now=now)
    if policy.has_lookup and ground != READ_ONLY:
        # Ask before anything is sent again, even where a retry would be safe: the answer
        # may be that it was done.
        return Plan(RECONCILE, "provider_lookup")
    if ground and attempts_left:
        return Plan(RETRY_SAFE, ground, move_to=Status.PLANNED)
    if ground:
        return _review(Reason.ATTEMPTS_EXHAUSTED, lost)
    return _review(Reason.NO_LOOKUP, lost)


def database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def _open_reviews(effect_ids: list[Any]) -> dict[Any, str]:
    """Effects a person has been asked about: nothing automatic may act on them."""
    rows = ReviewItem.objects.filter(effect_id__in=effect_ids, resolved_at__isnull=True)
    return dict(rows.values_list("effect_id", "reason"))


@dataclass
class Planned:
    effect: Effect
    plan: Plan


# The order of `/recovery`'s pages, by what the agent is asked to do. 0: planned, the agent's
# to run (`retry_safe`, unless blocked, halted or out of attempts); 1: lost, an expired lease
# or an `unknown` outcome (`reconcile`, `review` or `retry_safe`, by the tool); 2: in hand, a
# live lease or an effect awaiting confirmation or approval (`wait`). Recovery's own moves
# (lost → planned) only go to a class already read, so following the cursor sees each
# effect once unless someone else moves it meanwhile.
PLANNED_FIRST, LOST, IN_HAND = 0, 1, 2
URGENCY = Case(
    When(status=Status.PLANNED, then=Value(PLANNED_FIRST)),
    When(
        Q(status=Status.UNKNOWN)
        | Q(status=Status.DISPATCHING)
        & (Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now())),
        then=Value(LOST),
    ),
    default=Value(IN_HAND),
    output_field=IntegerField(),
)


@dataclass(frozen=True)
class Position:
    """Where a page of `/recovery` ended: its last effect's urgency, creation time and id."""

    urgency: int
    created_at: datetime
    id: Any


@dataclass
class Recovered:
    """One page of plans, the incomplete effects in scope counted by status, and where the next
    page starts (None on the last)."""

    plans: list[Planned]
    counts: dict[str, int]
    next: Position | None


def _page(scope: QuerySet[Effect], after: Position | None, limit: int) -> list[Effect]:
    """The next `limit` incomplete effects of `scope` in `URGENCY` order, then oldest first."""
    rows = scope.annotate(urgency=URGENCY)
    if after is not None:
        rows = rows.filter(
            Q(urgency__gt=after.urgency)
            | Q(urgency=after.urgency, created_at__gt=after.created_at)
            | Q(urgency=after.urgency, created_at=after.created_at, id__gt=after.id)
        )
    return list(rows.order_by("urgency", "created_at", "id")[:limit])


def _plans(effects: list[Effect]) -> list[Planned]:
    """Each effect's plan, from a handful of set-based reads over the page's effects."""
    now = database_now()
    policies = policies_for({e.tool for e in effects})
    blocked = blocked_among([e.id for e in effects])
    halted = halted_among([e.id for e in effects if e.status == Status.PLANNED])
    waiting_for_people = _open_reviews([e.id for e in effects])
    return [
        Planned(
            e,
            # What an operator decided is carried out by the ledger or a person: the agent waits.
            Plan(WAIT, OPERATOR_DECIDED)
            if e.requested_by == RequestedBy.OPERATOR
            else Plan(REVIEW, waiting_for_people[e.id])
            # Its approval item asks an operator, not the agent: the agent waits.
            if e.id in waiting_for_people and e.status != Status.AWAITING_APPROVAL
            else plan_for(
                e,
                policies[e.tool],
                blocked=str(e.id) in blocked,
                now=now,
                halted=str(e.id) in halted,
            ),
        )
        for e in effects
    ]


def recover(
    agent: Agent,
    *,
    owner: str | None,
    run_id: str | None,
    dry_run: bool,
    limit: int,
    after: Position | None = None,
) -> Recovered:
    """Plan the next `limit` matching incomplete effects after `after`; unless `dry_run`, apply
    the plans that need no provider (back to planned, or unknown plus a review item) and queue
    reconciliations. Reads and counts incomplete effects only."""
    scope = Effect.objects.filter(agent=agent, status__in=sorted(INCOMPLETE))
    if owner is not None:
        scope = scope.filter(lease_owner=owner)
    if run_id is not None:
        scope = scope.filter(run_id=run_id)
    effects = _page(scope, after, limit + 1)
    more = len(effects) > limit
    effects = effects[:limit]
    plans = _plans(effects)
    if not dry_run:
        actor = f"agent:{agent.name} (recovery)"
        for item in plans:
            item.effect = apply_plan(item.effect, item.plan, actor)
    counts = {
        row["status"]: row["n"] for row in scope.values("status").annotate(n=Count("id")).order_by()
    }
    last = effects[-1] if more else None
    following = Position(last.urgency, last.created_at, last.id) if last is not None else None
    return Recovered(plans, counts, following)


def apply_plan(effect: Effect, plan: Plan, actor: str) -> Effect:
    try:
        if plan.move_to and effect.status != plan.move_to:
            effect = transition(
                effect,
                plan.move_to,
                actor=actor,
                reason=plan.reason,
                where=[
                    (f"(status <> '{Status.DISPATCHING.value}' OR lease_expires_at <= now())", [])
                ],
            )
    except Superseded:
        # Someone else moved it between our read and write; report what it is now.
        return Effect.objects.get(pk=effect.pk)
    if plan.review:
        open_review(effect.id, plan.review)
    if plan.action == RECONCILE:
        # The reconciliation worker's queue of record (docs/architecture.md#the-two-job-systems),
        # then a wake-up so that a worker asks the provider now rather than at the next sweep.
        Effect.objects.filter(pk=effect.pk, next_check_at__isnull=True).update(next_check_at=Now())
        wake([effect.id])
    return effect
