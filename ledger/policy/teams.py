"""Teams: who belongs to which, and which effects a person may see (ADR 0014).

An effect belongs to its tool's team when the tool (the `Tool` row named by `Effect.tool`) has
one, otherwise to its agent's team, otherwise to no team. A person whose view is scoped sees the
effects of their own teams and those of no team; a person who sees all teams (an admin, or the
holder of the "all teams" grant) sees everything. While no team exists nobody is scoped, so a
deployment without teams behaves as it did before them.

Memberships carry their source: the identity provider's claim (rewritten at each sign-in by
`set_teams_from_claim`) or an admin (the admin pages, `manage.py teams`), which a claim never
removes. What a person may see is read once per request and kept on the user object, as the
roles are (`reviews.access.checks.roles_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AnonymousUser, Group, User
from django.contrib.postgres.expressions import ArraySubquery
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.signals import post_delete, post_save

from ledger.models import AllTeamsGrant, MembershipSource, Team, TeamMembership, Tool
from ledger.policy import configversion
from ledger.policy.roles import ADMIN

log = logging.getLogger(__name__)

# Claim values that named no team, logged once per process each (a claim repeats at every
# sign-in; one line is enough to tell an admin that a team is missing or misspelt).
_unknown_logged: set[str] = set()

_CACHE = ("_ledger_teams", "_ledger_sees_all", "_ledger_scope", "_ledger_any_team")
_exists: configversion.VersionedCache[bool] = configversion.VersionedCache()
for _signal in (post_save, post_delete):
    # This process sees its own new team at once; others through the table's trigger.
    _signal.connect(configversion.expire, sender=Team, dispatch_uid=f"teams-{_signal!r}")


# What `lookups` annotates on a user row, read with the roles in one query.
LOOKUPS = ("teams_any", "teams_granted", "teams_ids")


def lookups() -> dict[str, Any]:
    """Annotations for a queryset of users: whether any team exists, the user's grant and team
    ids (`reviews.access.checks.roles_of` reads them with the roles)."""
    return {
        "teams_any": Exists(Team.objects.all()),
        "teams_granted": Exists(AllTeamsGrant.objects.filter(user=OuterRef("pk"))),
        "teams_ids": ArraySubquery(
            TeamMembership.objects.filter(user=OuterRef("pk")).values("team_id")
        ),
    }


def remember(user: User, row: dict[str, Any], *, is_admin: bool) -> None:
    """Keep on the user object what `lookups` read, for the rest of the request."""
    user.__dict__["_ledger_any_team"] = bool(row["teams_any"])
    user.__dict__["_ledger_teams"] = frozenset(row["teams_ids"] or ())
    user.__dict__["_ledger_sees_all"] = is_admin or bool(row["teams_granted"])


def any_team(user: User | AnonymousUser | None = None) -> bool:
    """Whether any team exists: as read with the user's roles in this request, else remembered
    per configuration version (the teams table moves it)."""
    if user is not None and "_ledger_any_team" in user.__dict__:
        return user.__dict__["_ledger_any_team"]
    version = configversion.current()
    found = _exists.get("any", version)
    if found is None:
        found = Team.objects.exists()
        _exists.put("any", version, found)
    return found


def _forget(user: User) -> None:
    for name in _CACHE:
        user.__dict__.pop(name, None)


def set_teams_from_claim(user: User, names: Iterable[str]) -> None:
    """Make the user's claim-sourced memberships exactly the teams named (by name or slug).
    Unknown names are ignored and logged once; memberships an admin set are kept."""
    wanted = {str(n).strip() for n in names if str(n).strip()}
    teams = list(Team.objects.filter(Q(name__in=wanted) | Q(slug__in=wanted)))
    for unknown in sorted(wanted - {t.name for t in teams} - {t.slug for t in teams}):
        if unknown not in _unknown_logged:
            _unknown_logged.add(unknown)
            log.warning("teams claim names %r, which is no team; ignored", unknown)
    ids = {t.pk for t in teams}
    with transaction.atomic():
        claimed = TeamMembership.objects.filter(user=user, source=MembershipSource.CLAIM)
        claimed.exclude(team_id__in=ids).delete()
        have = set(claimed.values_list("team_id", flat=True))
        TeamMembership.objects.bulk_create(
            [
                TeamMembership(user=user, team_id=i, source=MembershipSource.CLAIM)
                for i in sorted(ids - have)
            ],
            ignore_conflicts=True,
        )
    _forget(user)


def add_member(user: User, team: Team) -> None:
    """An admin puts a person in a team (kept whatever the claim says)."""
    TeamMembership.objects.get_or_create(user=user, team=team, source=MembershipSource.ADMIN)
    _forget(user)


def remove_member(user: User, team: Team) -> None:
    """An admin takes a person out of a team, whatever the membership's source; a claim that
    still names the team puts it back at the next sign-in."""
    TeamMembership.objects.filter(user=user, team=team).delete()
    _forget(user)


def grant_all_teams(user: User, on: bool = True) -> None:
    """Give (or take back) the "all teams" grant."""
    if on:
        AllTeamsGrant.objects.get_or_create(user=user)
    else:
        AllTeamsGrant.objects.filter(user=user).delete()
    _forget(user)


def teams_of(user: User | AnonymousUser) -> frozenset[int]:
    """The ids of the user's teams, from every source."""
    if not user.is_authenticated:
        return frozenset()
    cached = user.__dict__.get("_ledger_teams")
    if cached is None:
        cached = frozenset(
            TeamMembership.objects.filter(user=user).values_list("team_id", flat=True)
        )
        user.__dict__["_ledger_teams"] = cached
    return cached


def _is_admin(user: User) -> bool:
    return user.is_superuser or user.groups.filter(name=ADMIN).exists()


def sees_all_teams(user: User | AnonymousUser) -> bool:
    """Admins always; anyone else (auditors included) only with the "all teams" grant."""
    if not user.is_authenticated:
        return False
    cached = user.__dict__.get("_ledger_sees_all")
    if cached is None:
        cached = _is_admin(user) or AllTeamsGrant.objects.filter(user=user).exists()
        user.__dict__["_ledger_sees_all"] = cached
    return cached


def scope_of(user: User | AnonymousUser) -> frozenset[int] | None:
    """None when the user sees everything (all teams, or no team exists at all); otherwise the
    ids of the teams whose effects they see, besides the effects of no team."""
    cached = user.__dict__.get("_ledger_scope", False)
    if cached is not False:
        return cached
    everything = not any_team(user) or sees_all_teams(user)
    scope = None if everything else teams_of(user)
    if user.is_authenticated:
        user.__dict__["_ledger_scope"] = scope
    return scope


def scope_now(user: User | AnonymousUser) -> frozenset[int] | None:
    """`scope_of` as the database has it now, whatever the user object remembers, in one query
    and not remembered: for a check that must not trust what was read earlier in the request or
    hours ago in a background job (taking a decision, `reviews.access.teams.decides_on`)."""
    row = None
    if user.is_authenticated:
        row = (
            User.objects.filter(pk=user.pk)
            .annotate(
                teams_admin=Exists(Group.objects.filter(user=OuterRef("pk"), name=ADMIN)),
                **lookups(),
            )
            .values("is_superuser", "teams_admin", *LOOKUPS)
            .first()
        )
    if row is None:
        return None if not Team.objects.exists() else frozenset()
    if not row["teams_any"] or row["is_superuser"] or row["teams_admin"] or row["teams_granted"]:
        return None
    return frozenset(row["teams_ids"] or ())


def effects_q(teams: frozenset[int], prefix: str = "") -> Q:
    """Effects (or rows reached through `prefix`, such as "effect__") of these teams or of no
    team: by the tool's team when the tool has one, else by the agent's."""
    teamed = Tool.objects.filter(team__isnull=False).values("name")
    mine = Tool.objects.filter(team__in=teams).values("name")
    by_agent = Q(**{f"{prefix}agent__team__isnull": True}) | Q(
        **{f"{prefix}agent__team__in": teams}
    )
    return Q(**{f"{prefix}tool__in": mine}) | (~Q(**{f"{prefix}tool__in": teamed}) & by_agent)


def tools_q(teams: frozenset[int], field: str = "tool") -> Q:
    """Rows naming a tool by `field` (statements, incidents) of these teams or of no team."""
    teamed = Tool.objects.filter(team__isnull=False).values("name")
    mine = Tool.objects.filter(team__in=teams).values("name")
    return Q(**{f"{field}__in": mine}) | ~Q(**{f"{field}__in": teamed})


def team_of_tool(name: str) -> Team | None:
    """The team that owns a tool, by name; None for no team or no such tool."""
    tool = Tool.objects.filter(name=name).select_related("team").first()
    return tool.team if tool is not None else None


def team_of_effect(tool: str, agent_id: int | None) -> Team | None:
    """The team an effect belongs to: its tool's, else its agent's."""
    team = team_of_tool(tool)
    if team is None and agent_id is not None:
        team = Team.objects.filter(agents__id=agent_id).first()
    return team


def may_see_team(user: User | AnonymousUser, team_id: int | None) -> bool:
    """Whether something owned by `team_id` (None: no team) is visible to the user."""
    scope = scope_of(user)
    return scope is None or team_id is None or team_id in scope


def may_manage_team(user: User | AnonymousUser, team_id: int | None) -> bool:
    """Whether the user may halt and resume (and manage limits on) something owned by `team_id`:
    admins anything; others only what their own teams own (never what no team owns, nor global
    halts). While no team exists, the rules before teams hold."""
    if not any_team(user):
        return True
    if user.is_authenticated and _is_admin(user):
        return True
    return team_id is not None and team_id in teams_of(user)
