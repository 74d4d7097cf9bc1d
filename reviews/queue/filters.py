"""The review queue's filters (and its exact-match search), and who may be assigned its items."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import django_filters
from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.utils import timezone

from ledger.models import Mode, Reason, ReviewItem, Severity
from ledger.models.states import Status
from ledger.policy.roles import ADMIN, OPERATOR
from ledger.policy.teams import scope_of
from reviews.access.teams import visible_items
from reviews.queue.pages import search

AGES = [
    ("lt1d", "Under a day"),
    ("1to7d", "1 to 7 days"),
    ("gt7d", "Over 7 days"),
    ("overdue", "Past its due time"),
]
SORTS = [
    ("opened", "Oldest first"),
    ("-opened", "Newest first"),
    ("due", "Due soonest"),
    ("effect_created", "Effect oldest first"),
]
# ?severity=high: by name in the query string, as the badges show it.
_SEVERITY_BY_NAME = {s.label: s for s in Severity}
SEVERITIES = [(s.label, s.label) for s in reversed(Severity)]
_ORDER = {
    "opened": ("opened_at", "id"),
    "-opened": ("-opened_at", "-id"),
    "due": ("due_at", "id"),
    "effect_created": ("effect_created_at", "id"),
}


def operators(user: Any = None) -> QuerySet[User]:
    """People who may be assigned review items; for a person whose view is scoped by team, only
    admins and the operators of their own teams (ADR 0014): others could not see the item, and
    their names are none of this person's business."""
    people = User.objects.filter(
        Q(groups__name__in=[OPERATOR, ADMIN]) | Q(is_superuser=True), is_active=True
    )
    scope = scope_of(user) if user is not None else None
    if scope is not None:
        people = people.filter(
            Q(team_memberships__team__in=scope) | Q(is_superuser=True) | Q(groups__name=ADMIN)
        )
    return people.distinct().order_by("username")


def assignable(user: Any) -> list[tuple[int, str]]:
    """(id, username) of everyone `user` may assign an item to, by username."""
    return list(operators(user).values_list("id", "username"))


def assignee_numbered(user: Any, person_id: int) -> User | None:
    """The person with this id, if `user` may assign items to them; None otherwise."""
    return operators(user).filter(pk=person_id).first()


class QueueFilter(django_filters.FilterSet):
    q = django_filters.CharFilter(
        label="Search",
        method="filter_search",
        max_length=500,
        help_text="an effect id, idempotency key, provider reference, target or run, exactly",
    )
    state = django_filters.ChoiceFilter(
        label="Items",
        choices=[("open", "Open"), ("resolved", "Resolved"), ("all", "All")],
        method="filter_state",
        empty_label=None,
    )
    status = django_filters.ChoiceFilter(
        label="Effect status",
        field_name="effect__status",
        choices=Status.choices,
        empty_label="any",
    )
    # Tool, agent and run (and the effect's age, for sorting) are the item's copies of its
    # effect's (ledger.models.review): the queue narrows by them without joining the effects.
    # The effect's status changes, so that filter still reads the effect.
    tool = django_filters.CharFilter(label="Tool", field_name="tool")
    agent = django_filters.CharFilter(label="Agent", field_name="agent__name")
    mode = django_filters.ChoiceFilter(
        label="Mode", field_name="agent__mode", choices=Mode.choices, empty_label="any"
    )
    run = django_filters.CharFilter(label="Run", field_name="run_id")
    reason = django_filters.ChoiceFilter(label="Reason", choices=Reason.choices, empty_label="any")
    severity = django_filters.ChoiceFilter(
        label="Severity", choices=SEVERITIES, method="filter_severity", empty_label="any"
    )
    age = django_filters.ChoiceFilter(
        label="Age", choices=AGES, method="filter_age", empty_label="any"
    )
    assignee = django_filters.CharFilter(
        label="Assignee", method="filter_assignee", help_text='a username, "me" or "none"'
    )
    sort = django_filters.ChoiceFilter(
        label="Sort", choices=SORTS, method="sort_by", empty_label=None
    )

    class Meta:
        model = ReviewItem
        fields: list[str] = []

    def __init__(self, data: Any = None, *args: Any, user: User | None = None, **kwargs: Any):
        data = data.copy() if data is not None else {}
        # Defaults that a bare /queue/ gets: open items, oldest first.
        for name, default in (("state", "open"), ("sort", "opened")):
            if not data.get(name):
                data[name] = default
        super().__init__(data, *args, **kwargs)
        self.user = user

    def filter_state(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        if value == "open":
            return queryset.filter(resolved_at__isnull=True)
        if value == "resolved":
            return queryset.filter(resolved_at__isnull=False)
        return queryset

    def filter_search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return search(queryset, value) if value.strip() else queryset

    def filter_age(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        now = timezone.now()
        if value == "lt1d":
            return queryset.filter(opened_at__gt=now - timedelta(days=1))
        if value == "1to7d":
            return queryset.filter(
                opened_at__lte=now - timedelta(days=1), opened_at__gt=now - timedelta(days=7)
            )
        if value == "gt7d":
            return queryset.filter(opened_at__lte=now - timedelta(days=7))
        return queryset.filter(due_at__lt=now, resolved_at__isnull=True)

    def filter_severity(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(severity=_SEVERITY_BY_NAME[value])

    def filter_assignee(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        value = value.strip()
        if value == "none":
            return queryset.filter(assignee__isnull=True)
        if value == "me" and self.user is not None:
            return queryset.filter(assignee=self.user)
        return queryset.filter(assignee__username=value)

    def sort_by(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.order_by(*_ORDER[value])


def queue_filter(data: Any, user: User) -> QueueFilter:
    """The queue's filter over the items of effects the person may see (their teams',
    ADR 0014)."""
    return QueueFilter(data, queryset=visible_items(user), user=user)


def valid_query(data: Any) -> bool:
    """Whether the queue's filter takes `data` as it is (a query about to be saved); nothing is
    read."""
    return QueueFilter(data, queryset=ReviewItem.objects.none()).is_valid()
