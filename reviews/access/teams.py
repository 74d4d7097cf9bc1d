"""What of the ledger a person may see, by team (ADR 0014): one place every view filters through.

The rule itself lives in `ledger.policy.teams` (an effect is its tool's team's, else its agent's;
effects of no team are everyone's). Here it is applied to querysets and single lookups. Another
team's effect, review item, run, statement or incident is answered with a 404, exactly as a
missing one is, so its existence does not leak; nothing here raises 403.
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Model, Q, QuerySet
from django.http import Http404

from ledger.models import Agent, Effect, Halt, ReviewItem, Run, Tool
from ledger.policy.teams import effects_q, may_manage_team, scope_now, scope_of, tools_q

M = TypeVar("M", bound=Model)
Person = User | AnonymousUser

NOT_FOUND = "No such effect."


def scoped(user: Person) -> bool:
    """Whether the user's view is narrowed to their teams at all."""
    return scope_of(user) is not None


def visible_effects(user: Person, qs: QuerySet[M], prefix: str = "") -> QuerySet[M]:
    """`qs` (effects, or rows reaching an effect through `prefix`, such as "effect__") narrowed
    to what the user may see; unchanged for whoever sees all teams."""
    scope = scope_of(user)
    return qs if scope is None else qs.filter(effects_q(scope, prefix))


def visible_items(user: Person, qs: QuerySet[ReviewItem] | None = None) -> QuerySet[ReviewItem]:
    """Review items of effects the user may see."""
    base = ReviewItem.objects.all() if qs is None else qs
    return visible_effects(user, base, "effect__")


def visible_by_tool(user: Person, qs: QuerySet[M], field: str = "tool") -> QuerySet[M]:
    """Rows that name their tool (statement imports, incidents) narrowed to the user's teams'
    tools and the tools of no team."""
    scope = scope_of(user)
    return qs if scope is None else qs.filter(tools_q(scope, field))


def effect_or_404(
    user: Person, effect_id: uuid.UUID | str, qs: QuerySet[Effect] | None = None
) -> Effect:
    """The effect, if it exists and the user may see it; a 404 otherwise, the same for both."""
    base = Effect.objects.all() if qs is None else qs
    found = visible_effects(user, base).filter(pk=effect_id).first()
    if found is None:
        raise Http404(NOT_FOUND)
    return found


def check_effect(user: Person, effect_id: uuid.UUID | str) -> None:
    """A 404 unless the user may see the effect (for views that read it their own way)."""
    if scope_of(user) is not None:
        effect_or_404(user, effect_id, Effect.objects.only("id"))


def decides_on(user: Person, effect_id: uuid.UUID | str) -> bool:
    """Whether the user's teams cover the effect as the database has them now (`scope_now`),
    whatever was read earlier: what every decision checks, whoever takes it and however long
    ago the request that started it was checked (a background bulk job)."""
    scope = scope_now(user)
    return scope is None or Effect.objects.filter(effects_q(scope), pk=effect_id).exists()


def visible_tools(user: Person) -> set[str]:
    """Names of the declared tools of the user's teams and of no team."""
    scope = scope_of(user)
    tools = Tool.objects.all()
    if scope is not None:
        tools = tools.filter(Q(team__isnull=True) | Q(team__in=scope))
    return set(tools.values_list("name", flat=True))


def visible_agents(user: Person) -> QuerySet[Agent]:
    """Agents of the user's teams and of no team."""
    scope = scope_of(user)
    agents = Agent.objects.all()
    return agents if scope is None else agents.filter(Q(team__isnull=True) | Q(team__in=scope))


def item_or_404(user: Person, item_id: Any) -> ReviewItem:
    """The review item, if its effect is one the user may see; a 404 otherwise."""
    try:
        found = visible_items(user).filter(pk=int(item_id)).first()
    except (TypeError, ValueError):
        found = None
    if found is None:
        raise Http404("No such review item.")
    return found


def visible_object_or_404(user: Person, qs: QuerySet[M], field: str = "tool", **lookup: Any) -> M:
    """One row naming a tool (an incident, a statement import), by `lookup`, if visible."""
    found = visible_by_tool(user, qs, field).filter(**lookup).first()
    if found is None:
        raise Http404("Not found.")
    return found


def team_of_scope(scope: str, target: str) -> int | None:
    """The team owning a halt's or limit's target: a tool's, an agent's, or a run's when every
    agent that ran it is of that one team; None for everything else (a global halt) or an
    unknown name."""
    if scope == "tool":
        return Tool.objects.filter(name=target).values_list("team_id", flat=True).first()
    if scope == "agent":
        return Agent.objects.filter(name=target).values_list("team_id", flat=True).first()
    if scope == "run":
        owners = set(Run.objects.filter(run_id=target).values_list("agent__team_id", flat=True))
        return owners.pop() if len(owners) == 1 else None
    return None


def may_manage(user: Person, scope: str, target: str) -> bool:
    """Whether the user may set or resume a halt (or a limit) with this scope and target."""
    return may_manage_team(user, team_of_scope(scope, target))


def may_switch_halt(user: Person, halt: Halt) -> bool:
    """Whether the user may set or resume this halt, wherever they ask (the halts page, Slack):
    one narrowed to teams by its teams' operators (admins always), whoever used its run since;
    any other by who may manage its scope and target."""
    if halt.teams is None:
        return may_manage(user, halt.scope, halt.value)
    return bool(halt.teams) and all(may_manage_team(user, team) for team in halt.teams)
