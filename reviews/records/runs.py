"""What recovery will do for one agent's run, as the run page shows it: the API's dry run.

`preview` calls the function the agent's `POST /recovery` with `dry_run` calls
(`ledger.effects.recovery.recover`, with `dry_run=True`): nothing is moved, queued or opened.
Each effect's plan is said for an operator (what will be done, why, and who acts next), with
what blocks it and every effect of the run counted by status. `run_agent` finds whose run it is
when the page names no agent (`Run`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet

from ledger.effects.recovery import (
    HONOURS_KEY,
    NOT_FOUND,
    OPERATOR_DECIDED,
    READ_ONLY,
    RECONCILE,
    RETRY_SAFE,
    REVIEW,
    VERIFIED_ABSENT,
    WAIT,
    Planned,
    recover,
)
from ledger.models import Agent, Effect, Reason, Run
from ledger.models.states import Kind
from ledger.rules.interlocks import Upstream, upstreams_of
from reconcilers.execution import can_execute
from reviews.access.teams import Person, scoped, visible_agents, visible_effects
from reviews.decisions.whatnext import money_of

# What each `/recovery` action means, said for an operator: in a row, and counted.
PLAN_TEXT = {
    RETRY_SAFE: "send it again (same key)",
    RECONCILE: "ask the provider first",
    REVIEW: "leave it for a person",
    WAIT: "wait",
}
COUNTED = {
    RETRY_SAFE: "will be retried",
    RECONCILE: "asked of the provider",
    REVIEW: "left for review",
    WAIT: "waiting",
}
# Why an effect waits, and for whom (the reasons `ledger.effects.recovery.plan_for` gives).
WAITS_FOR = {
    "halted": "a halt to be resumed",
    "blocked": "an upstream effect to be confirmed",
    "leased": "the agent holding its lease",
    "awaiting_confirmation": "the provider's confirmation",
    "awaiting_approval": "an operator's approval",
    OPERATOR_DECIDED: "the ledger or an operator, who carry out what an operator decided",
}


# Why, for each reason `ledger.effects.recovery.plan_for` gives (a review's reason is its item's).
WHY = {
    **dict(Reason.choices),
    "planned": "not sent yet, free to be claimed",
    "blocked": "an upstream effect is not confirmed",
    "halted": "a halt covers it",
    "leased": "its lease is still running",
    "awaiting_confirmation": "the provider has yet to confirm it",
    "awaiting_approval": "above its tool's approval threshold",
    "provider_lookup": "its outcome is unknown, and the provider can be asked",
    READ_ONLY: "the tool only reads",
    HONOURS_KEY: "the provider honours the idempotency key",
    NOT_FOUND: "the provider's lookup found nothing under the key",
    VERIFIED_ABSENT: "operators checked the provider never received it",
    OPERATOR_DECIDED: "an operator decided it; its agent does not act on it",
}


@dataclass(frozen=True)
class Row:
    effect: Effect
    action: str
    reason: str
    why: str
    plan: str
    who: str
    amount: str
    blocked_by: tuple[Upstream, ...]


def _who(item: Planned, agent: str, ledger_sends: bool) -> str:
    """Who acts next on one effect, given its plan."""
    action, reason = item.plan.action, item.plan.reason
    if action == RETRY_SAFE:
        return "the ledger (it sends compensations itself)" if ledger_sends else f"agent {agent}"
    if action == RECONCILE:
        return "the ledger (provider lookup)"
    if action == REVIEW:
        return "an operator"
    return f"nobody yet: it waits for {WAITS_FOR[reason]}" if reason in WAITS_FOR else "nobody yet"


def _rows(agent: Agent, plans: list[Planned]) -> list[Row]:
    ids = [item.effect.pk for item in plans]
    upstreams = upstreams_of(ids)
    # Compensations are the only effects the ledger sends itself: ask once per tool.
    executes = {
        tool: can_execute(tool)
        for tool in {i.effect.tool for i in plans if i.effect.kind == Kind.COMPENSATION}
    }
    return [
        Row(
            effect=item.effect,
            action=item.plan.action,
            reason=item.plan.reason,
            why=WHY.get(item.plan.reason, ""),
            plan=PLAN_TEXT.get(item.plan.action, item.plan.action),
            who=_who(item, agent.name, executes.get(item.effect.tool, False)),
            amount=money_of(item.effect),
            blocked_by=tuple(u for u in upstreams[str(item.effect.pk)] if u.blocking),
        )
        for item in plans
    ]


def _narrowed(
    user: Any, agent: Agent, run_id: str, plans: list[Planned]
) -> tuple[list[Planned], dict[str, int]]:
    """A run's plans and counts without the effects of other teams' tools (an agent's run may
    call a tool another team owns)."""
    mine = visible_effects(user, Effect.objects.filter(agent=agent, run_id=run_id))
    shown = set(mine.filter(pk__in=[p.effect.pk for p in plans]).values_list("id", flat=True))
    return [p for p in plans if p.effect.pk in shown], _run_counts(mine)


def _run_counts(effects: QuerySet[Effect]) -> dict[str, int]:
    """Every effect of the run by status, terminal ones too (the API's counts are of incomplete
    effects only): one run's effects, over effect_journal_idx."""
    return {
        row["status"]: row["n"]
        for row in effects.values("status").annotate(n=Count("id")).order_by()
    }


@dataclass(frozen=True)
class RunPreview:
    """What recovery would do for the run's effects, and every effect of the run by status."""

    rows: list[Row]
    counts: list[tuple[str, int]]  # (status, effects), by status
    summary: list[tuple[int, str, str]]  # (effects, what is done to them, the action)
    truncated: bool  # more effects wait than one dry run plans


def run_agent(user: Person, run_id: str, name: str) -> tuple[Agent | None, list[str]]:
    """The agent whose run the page shows: the one named, else the run's only agent; and, when
    the run has several agents and none is named, their names to choose from. Agents of other
    teams are not there for a scoped person (ADR 0014)."""
    agents = visible_agents(user)
    if name:
        return agents.filter(name=name).first(), []
    owners = list(
        Run.objects.filter(run_id=run_id, agent__in=agents)
        .select_related("agent")
        .order_by("agent__name")
    )
    if len(owners) == 1:
        return owners[0].agent, []
    return None, [run.agent.name for run in owners]


def preview(user: Person, agent: Agent, run_id: str, limit: int) -> RunPreview:
    """The agent's `POST /recovery` dry run for the run, at most `limit` effects planned,
    without the effects of other teams' tools."""
    page = recover(agent, owner=None, run_id=run_id, dry_run=True, limit=limit)
    plans, counts = page.plans, _run_counts(Effect.objects.filter(agent=agent, run_id=run_id))
    if scoped(user):
        plans, counts = _narrowed(user, agent, run_id, plans)
    by_action = Counter(item.plan.action for item in plans)
    return RunPreview(
        rows=_rows(agent, plans),
        counts=sorted(counts.items()),
        summary=[(by_action[a], COUNTED[a], a) for a in (RETRY_SAFE, RECONCILE, REVIEW, WAIT)],
        truncated=page.next is not None,
    )
