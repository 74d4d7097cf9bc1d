"""People's roles: groups that the pages check."""

from __future__ import annotations

from django.contrib.auth.models import Group, User

OPERATOR, AUDITOR, ADMIN = "operator", "auditor", "admin"
ROLES = (OPERATOR, AUDITOR, ADMIN)


def grant(user: User, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    if role == ADMIN:
        user.is_staff = True
        user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
