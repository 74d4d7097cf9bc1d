"""What recovery will do for a run: the API's dry run, as a page.

`/runs/?run=<run_id>&agent=<name>` answers what the agent's `POST /recovery` with `dry_run`
would answer for the run, by calling the same function (`ledger.effects.recovery.recover`, with
`dry_run=True`): nothing is moved, queued or opened. Without an agent, the run's own agents are
looked up (`Run`): one is taken, several are offered. Read-only for every reader role.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger.effects.interlocks import Upstream, upstreams_of
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
from ledger.effects.states import Kind
from ledger.models import Agent, Effect, Reason, Run
from reconcilers.execution import can_execute
from reviews.access.checks import reader
from reviews.access.teams import scoped, visible_agents, visible_effects
from reviews.decisions.whatnext import money_of


class RunForm(forms.Form):
    run = forms.CharField(max_length=200, label="Run id")
    agent = forms.CharField(
        max_length=100, required=False, label="Agent", help_text="Empty: the run's own agent."
    )


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
    "halted": "a halt to be lifted",
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


@require_GET
@reader
def preview(request: HttpRequest) -> HttpResponse:
    if not request.GET:
        return render(request, "reviews/run.html", {"form": RunForm()})
    form = RunForm(request.GET)
    if not form.is_valid():
        return render(request, "reviews/run.html", {"form": form}, status=400)
    run_id, name = form.cleaned_data["run"], form.cleaned_data["agent"]
    context: dict[str, Any] = {"form": form, "run_id": run_id, "agent_name": name}
    # Runs of agents of other teams are not there for a scoped person (ADR 0014).
    agents = visible_agents(request.user)
    if name:
        agent = agents.filter(name=name).first()
    else:
        owners = list(
            Run.objects.filter(run_id=run_id, agent__in=agents)
            .select_related("agent")
            .order_by("agent__name")
        )
        agent = owners[0].agent if len(owners) == 1 else None
        context["choices"] = [run.agent.name for run in owners] if len(owners) > 1 else []
    if agent is None:
        # Another team's run is answered as a run nobody has (ADR 0014).
        return render(request, "reviews/run.html", context)
    page = recover(
        agent, owner=None, run_id=run_id, dry_run=True, limit=settings.LEDGER_RECOVERY_LIMIT
    )
    plans, counts = page.plans, _run_counts(Effect.objects.filter(agent=agent, run_id=run_id))
    if scoped(request.user):
        plans, counts = _narrowed(request.user, agent, run_id, plans)
    by_action = Counter(item.plan.action for item in plans)
    context.update(
        agent=agent,
        rows=_rows(agent, plans),
        counts=sorted(counts.items()),
        summary=[(by_action[a], COUNTED[a], a) for a in (RETRY_SAFE, RECONCILE, REVIEW, WAIT)],
        truncated=page.next is not None,
        limit=settings.LEDGER_RECOVERY_LIMIT,
    )
    return render(request, "reviews/run.html", context)
