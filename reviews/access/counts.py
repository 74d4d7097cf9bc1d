"""Every count and banner a person sees, narrowed to their teams (ADR 0014).

Whoever sees all teams (and everyone while no team exists) reads the ledger's shared summary
(`ledger.overview.summary`), refreshed by a thread, as before teams. A scoped person's
counts cannot come from it, since it does not know teams: they are counted over the effects
they may see, and kept per set of teams for `LEDGER_METRICS_REFRESH` seconds, so the overview's
poll does not count again for every person of a team every few seconds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from ledger.models import Agent, Effect, Halt, HaltScope, ReviewItem, Tool
from ledger.overview.summary import REVIEW_AGE_HOURS, Summary, summary
from ledger.policy.teams import effects_q, scope_of

_lock = threading.Lock()
# frozenset of team ids → (monotonic time counted, the summary as this set of teams sees it).
_kept: dict[frozenset[int], tuple[float, Summary]] = {}


def summary_for(user: Any) -> Summary:
    """The ledger's summary as `user` may see it."""
    shared = summary.latest()
    scope = scope_of(user)
    if scope is None:
        return shared
    now = time.monotonic()
    with _lock:
        kept = _kept.get(scope)
    if kept is not None and now - kept[0] < settings.LEDGER_METRICS_REFRESH:
        return kept[1]
    counted = _count(shared, scope)
    with _lock:
        _kept[scope] = (now, counted)
    return counted


def forget() -> None:
    """Drop the counts kept per team (tests, and a change of teams that must show at once)."""
    with _lock:
        _kept.clear()


def _count(shared: Summary, scope: frozenset[int]) -> Summary:
    mine = effects_q(scope)
    effect_counts = {
        (row["agent__mode"], row["kind"], row["tool"], row["status"]): row["n"]
        for row in Effect.objects.filter(mine)
        .values("agent__mode", "kind", "tool", "status")
        .annotate(n=Count("id"))
        .order_by()
    }
    # The shared summary names the oldest blocked branches; a team sees those of its effects.
    named = [b["id"] for b in shared.blocked]
    visible_ids = set(Effect.objects.filter(mine, pk__in=named).values_list("id", flat=True))
    blocked = [b for b in shared.blocked if b["id"] in visible_ids]
    return replace(
        shared,
        effect_counts=effect_counts,
        review_ages=_review_ages(scope),
        blocked=blocked,
        blocked_total=len(blocked),
        taken_at=timezone.now(),
    )


def _review_ages(scope: frozenset[int]) -> dict[str | None, tuple[int, ...]]:
    """Open review items of the teams' effects per age bucket and agent's mode."""
    now = timezone.now()
    bounds = [*REVIEW_AGE_HOURS[1:], None]
    buckets = {}
    for i, (low, high) in enumerate(zip(REVIEW_AGE_HOURS, bounds, strict=True)):
        when = Q(opened_at__lte=now - timezone.timedelta(hours=low))
        if high is not None:
            when &= Q(opened_at__gt=now - timezone.timedelta(hours=high))
        buckets[f"b{i}"] = Count("id", filter=when)
    rows = (
        ReviewItem.objects.filter(effects_q(scope, "effect__"), resolved_at__isnull=True)
        .values("agent__mode")
        .annotate(**buckets)
        .order_by()
    )
    return {
        row["agent__mode"]: tuple(row[f"b{i}"] for i in range(len(REVIEW_AGE_HOURS)))
        for row in rows
    }


def visible_halts(user: Any, halts: list[Halt]) -> list[Halt]:
    """The halts a person is shown: global halts, run halts of every agent or narrowed to one of
    their teams, and those on the tools and agents of their teams or of no team."""
    scope = scope_of(user)
    if scope is None:
        return halts
    hidden_tools = set(
        Tool.objects.filter(team__isnull=False)
        .exclude(team__in=scope)
        .values_list("name", flat=True)
    )
    hidden_agents = set(
        Agent.objects.filter(team__isnull=False)
        .exclude(team__in=scope)
        .values_list("name", flat=True)
    )
    return [
        h
        for h in halts
        if not (h.scope == HaltScope.TOOL and h.value in hidden_tools)
        and not (h.scope == HaltScope.AGENT and h.value in hidden_agents)
        and (h.teams is None or not scope.isdisjoint(h.teams))
    ]
