"""What may be done with an agent's incomplete effects after a restart.

The ledger never re-sends a request itself: it decides what is allowed and the owning agent
re-executes `retry_safe` effects. An expired lease or an `unknown` outcome is decided by what
the tool can do (DESIGN.md, "Recovery"):

| tool can…                          | then                                          |
| ---------------------------------- | --------------------------------------------- |
| read_only                          | back to planned: retry freely                 |
| has_lookup                         | reconcile: ask the provider before any retry  |
| honours_key (within key_ttl)       | back to planned: the same key cannot duplicate |
| nothing                            | unknown, and a review item at once            |
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count
from django.db.models.functions import Now

from ledger.models import Agent, Effect
from ledger.states import INCOMPLETE, Status
from ledger.tools import Policy, policies_for
from ledger.transitions import Superseded, transition
from reconcilers.queue import wake
from reviews.models import Reason, ReviewItem
from reviews.queue import open_review

RETRY_SAFE, RECONCILE, REVIEW, WAIT = "retry_safe", "reconcile", "review", "wait"


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    move_to: Status | None = None
    review: str | None = None


def decide(effect: Effect, policy: Policy, *, blocked: bool, now: datetime) -> Decision:
    """The allowed action for one incomplete effect. Pure: no queries, no writes."""
    attempts_left = effect.attempt < effect.max_attempts
    if effect.status == Status.PLANNED:
        if blocked:
            return Decision(WAIT, "blocked_by_upstream")
        if not attempts_left:
            return Decision(REVIEW, "attempts_exhausted", review=Reason.ATTEMPTS_EXHAUSTED)
        return Decision(RETRY_SAFE, "planned")
    if effect.status == Status.AWAITING_CONFIRMATION:
        return Decision(WAIT, "awaiting_confirmation")
    if (
        effect.status == Status.DISPATCHING
        and effect.lease_expires_at
        and effect.lease_expires_at > now
    ):
        return Decision(WAIT, "lease_live")

    # An expired lease or an unknown outcome: the provider may have done it 0, 1 or n times.
    lost = Status.UNKNOWN if effect.status == Status.DISPATCHING else None
    if policy.read_only:
        if attempts_left:
            return Decision(RETRY_SAFE, "read_only", move_to=Status.PLANNED)
        return Decision(REVIEW, "attempts_exhausted", lost, Reason.ATTEMPTS_EXHAUSTED)
    if policy.has_lookup:
        return Decision(RECONCILE, "provider_lookup")
    if policy.honours_key and policy.key_ttl and now - effect.created_at < policy.key_ttl:
        if attempts_left:
            return Decision(RETRY_SAFE, "provider_honours_key", move_to=Status.PLANNED)
        return Decision(REVIEW, "attempts_exhausted", lost, Reason.ATTEMPTS_EXHAUSTED)
    return Decision(REVIEW, "no_lookup", lost, Reason.NO_LOOKUP)


def database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def _blocked_ids(effect_ids: list[Any]) -> set[Any]:
    if not effect_ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT d.downstream_id FROM ledger_effectdependency d "
            "JOIN ledger_effect u ON u.id = d.upstream_id "
            "WHERE d.downstream_id = ANY(%s) AND u.status <> 'confirmed'",
            [effect_ids],
        )
        return {row[0] for row in cursor.fetchall()}


def _open_reviews(effect_ids: list[Any]) -> dict[Any, str]:
    """Effects a person has been asked about: nothing automatic may act on them."""
    rows = ReviewItem.objects.filter(effect_id__in=effect_ids, resolved_at__isnull=True)
    return dict(rows.values_list("effect_id", "reason"))


@dataclass
class Planned:
    effect: Effect
    decision: Decision


def recover(
    agent: Agent,
    *,
    owner: str | None,
    run_id: str | None,
    dry_run: bool,
    limit: int,
) -> tuple[list[Planned], dict[str, int]]:
    """Decide every matching incomplete effect; unless `dry_run`, apply the decisions that need
    no provider (back to planned, or unknown plus a review item) and queue reconciliations."""
    scope = Effect.objects.filter(agent=agent)
    if owner is not None:
        scope = scope.filter(lease_owner=owner)
    if run_id is not None:
        scope = scope.filter(run_id=run_id)
    effects = list(scope.filter(status__in=sorted(INCOMPLETE)).order_by("created_at", "id")[:limit])
    now = database_now()
    policies = policies_for({e.tool for e in effects})
    blocked = _blocked_ids([e.id for e in effects])
    waiting_for_people = _open_reviews([e.id for e in effects])
    plan = [
        Planned(
            e,
            Decision(REVIEW, waiting_for_people[e.id])
            if e.id in waiting_for_people
            else decide(e, policies[e.tool], blocked=e.id in blocked, now=now),
        )
        for e in effects
    ]
    if not dry_run:
        actor = f"agent:{agent.name} (recovery)"
        for item in plan:
            item.effect = apply_decision(item.effect, item.decision, actor)
    counts = {
        row["status"]: row["n"] for row in scope.values("status").annotate(n=Count("id")).order_by()
    }
    return plan, counts


def apply_decision(effect: Effect, decision: Decision, actor: str) -> Effect:
    try:
        if decision.move_to and effect.status != decision.move_to:
            effect = transition(
                effect,
                decision.move_to,
                actor=actor,
                reason=decision.reason,
                where=[("(status <> 'dispatching' OR lease_expires_at <= now())", [])],
            )
    except Superseded:
        # Someone else moved it between our read and write; report what it is now.
        return Effect.objects.get(pk=effect.pk)
    if decision.review:
        open_review(effect.id, decision.review)
    if decision.action == RECONCILE:
        # The reconciliation worker's queue of record (DESIGN.md, "Work queues"), then a
        # wake-up so that a worker asks the provider now rather than at the next sweep.
        Effect.objects.filter(pk=effect.pk, next_check_at__isnull=True).update(next_check_at=Now())
        wake([effect.id])
    return effect
