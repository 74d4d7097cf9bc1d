"""Each tool's and agent's declared limits with how much of them the current window has used,
and the claims refused lately, as the limits page shows them.

The numbers are the ones the claim trigger counts (`ledger.rules.limits`, migration 0014):
claims in the calendar minute (a `LimitCounter` row per scope and minute) and amounts charged in
the rolling 24 hours (`AmountCharge` rows). Reading them takes three queries whatever the number
of tools: the page is read while a limit bites, when the database is busiest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, timedelta

from django.db.models import Q, Sum
from django.utils import timezone

from ledger.models import Agent, Alert, AlertKind, AmountCharge, LimitCounter, Tool
from ledger.policy.iso4217 import major_units
from ledger.policy.money import amount_limits
from reviews.access.teams import Person, scoped, visible_agents, visible_tools


@dataclass(frozen=True)
class Usage:
    """One limit as the page shows it; amounts already in major units with their currency."""

    scope: str  # "tool:charge_card", "agent:<id>": the trigger's scope
    owner: str  # "tool charge_card", "agent shop-bot"
    which: str  # "claims per minute", "amount per 24 h"
    used_count: int
    max_count: int
    used: str
    maximum: str
    left: str


def _declared() -> list[tuple[str, str, int | None, dict[str, int]]]:
    """(scope, owner, claims per minute, {currency: minor units per 24 h}) for every tool and
    agent that declares a limit; a malformed stored amount limit shows as none rather than
    failing the page (the trigger, not this page, enforces it)."""
    found = []
    has_limit = Q(limit_claims_per_minute__isnull=False) | ~Q(limit_amount_per_day={})
    for tool in Tool.objects.filter(has_limit).order_by("name"):
        found.append((f"tool:{tool.name}", f"tool {tool.name}", tool))
    for agent in Agent.objects.filter(has_limit).order_by("name"):
        found.append((f"agent:{agent.id}", f"agent {agent.name}", agent))
    declared = []
    for scope, owner, holder in found:
        try:
            amounts = amount_limits(holder.limit_amount_per_day or {})
        except ValueError:
            amounts = {}
        declared.append((scope, owner, holder.limit_claims_per_minute, amounts))
    return declared


def _used(scopes: list[str]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Claims in the current minute per scope, and amounts charged in the last 24 hours per
    scope and currency."""
    # The trigger's minute key: the calendar minute in UTC, as migration 0014 writes it.
    minute = timezone.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
    claims = dict(
        LimitCounter.objects.filter(scope__in=scopes, period=minute, currency="").values_list(
            "scope", "used"
        )
    )
    charged = {
        (row["scope"], row["currency"]): row["total"]
        for row in AmountCharge.objects.filter(
            scope__in=scopes, charged_at__gt=timezone.now() - timedelta(hours=24)
        )
        .values("scope", "currency")
        .annotate(total=Sum("amount_minor"))
    }
    return claims, charged


def usages(user: Person | None = None) -> list[Usage]:
    """Every declared limit with its use in the current window; with `user`, only those on the
    tools and agents of their teams or of no team (ADR 0014)."""
    declared = _declared()
    if user is not None and scoped(user):
        tools = visible_tools(user)
        agents = {str(pk) for pk in visible_agents(user).values_list("pk", flat=True)}
        declared = [
            d
            for d in declared
            if (d[0].startswith("tool:") and d[0][5:] in tools)
            or (d[0].startswith("agent:") and d[0][6:] in agents)
        ]
    claims, charged = _used([scope for scope, *_ in declared])
    rows = []
    for scope, owner, per_minute, amounts in declared:
        if per_minute is not None:
            used = claims.get(scope, 0)
            left = max(per_minute - used, 0)
            shown = (str(used), str(per_minute), str(left))
            rows.append(Usage(scope, owner, "claims per minute", used, per_minute, *shown))
        for currency, maximum in sorted(amounts.items()):
            used = charged.get((scope, currency), 0)
            shown = tuple(major_units(n, currency) for n in (used, maximum, max(maximum - used, 0)))
            rows.append(Usage(scope, owner, f"amount per 24 h ({currency})", used, maximum, *shown))
    return rows


def _holder_visible(which: str, tools: set[str], agents: set[str]) -> bool:
    scope, _, rest = str(which).partition(":")
    if scope == "tool":
        return any(rest.startswith(f"{t}:") for t in tools)
    if scope == "agent":
        return any(rest.startswith(f"{a}:") for a in agents)
    return True


def recent_refusals(user: Person, latest: int) -> list[Alert]:
    """The `latest` claims refused by a limit, newest first; for a scoped person, only those of
    the tools and agents of their teams or of no team."""
    shown = list(
        Alert.objects.filter(kind=AlertKind.LIMIT_EXCEEDED).order_by("-created_at")[:latest]
    )
    if not scoped(user):
        return shown
    # A refusal names its limit's holder ("tool:<name>:…", "agent:<name>:…").
    tools = visible_tools(user)
    agents = set(visible_agents(user).values_list("name", flat=True))
    return [
        r
        for r in shown
        if _holder_visible((r.payload.get("limit") or {}).get("which", ""), tools, agents)
    ]
