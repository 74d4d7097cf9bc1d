"""Who may see and do what in the pages: one place, raising `PermissionDenied`.

Roles are groups (`ledger.policy.roles`): auditors read and export, operators also act, admins do
everything (they manage tools, agents and keys in the admin). Every page needs a login.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser, Group, User
from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Q
from django.http import HttpRequest, HttpResponse

from ledger.policy import teams
from ledger.policy.roles import ADMIN, AUDITOR, OPERATOR

View = Callable[..., HttpResponse]


def roles_of(user: User | AnonymousUser) -> frozenset[str]:
    """The user's roles, read once per request (cached on the user object). The same query
    reads what the user may see by team (`ledger.policy.teams.remember`), so that teams cost
    no query of their own on any page."""
    if not user.is_authenticated:
        return frozenset()
    cached = getattr(user, "_ledger_roles", None)
    if cached is None:
        row = (
            User.objects.filter(pk=user.pk)
            .annotate(
                group_names=ArraySubquery(Group.objects.filter(user=OuterRef("pk")).values("name")),
                **teams.lookups(),
            )
            .values("group_names", *teams.LOOKUPS)
            .first()
        ) or {"group_names": []}
        cached = frozenset(row["group_names"])
        if user.is_superuser:
            cached |= {ADMIN}
        user._ledger_roles = cached
        if "teams_any" in row:
            teams.remember(user, row, is_admin=ADMIN in cached)
    return cached


def can_read(user: User | AnonymousUser) -> bool:
    return bool(roles_of(user) & {OPERATOR, AUDITOR, ADMIN})


def can_act(user: User | AnonymousUser) -> bool:
    return bool(roles_of(user) & {OPERATOR, ADMIN})


def acts_now(user: User | AnonymousUser) -> bool:
    """Whether the account may act as the database has it now: active, and an operator or an
    admin. Unlike `can_act`, nothing read earlier counts (the roles this request read, a session
    signed in hours ago, a token made last month, a background job queued before the role was
    taken away): what every decision checks, whatever channel it came through
    (`reviews.decisions.decide`)."""
    if not user.is_authenticated:
        return False
    return (
        User.objects.filter(pk=user.pk, is_active=True)
        .filter(Q(is_superuser=True) | Q(groups__name__in=(OPERATOR, ADMIN)))
        .exists()
    )


def _needs(check: Callable[[Any], bool]) -> Callable[[View], View]:
    def decorator(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not check(request.user):
                raise PermissionDenied("Your role does not allow this.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


# Pages anyone with a role may read (operators, auditors, admins).
reader = _needs(can_read)
# Anything that changes the ledger: operators and admins, never auditors.
actor = _needs(can_act)
