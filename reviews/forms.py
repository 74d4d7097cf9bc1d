"""Forms of the operator pages: the queue's filters, the decisions, statement uploads and
incident acknowledgements."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import django_filters
from django import forms
from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.utils import timezone

from ledger.models import Mode, Reason, ReviewItem, Severity, Tool
from ledger.roles import ADMIN, OPERATOR
from ledger.states import Status
from reviews.decisions import (
    ACTIONS,
    APPROVE,
    CANCEL,
    COMPENSATE,
    CONFIRM,
    FAIL,
    REJECT,
    RETRY,
    Ask,
)

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


def operators() -> QuerySet[User]:
    """People who may be assigned review items."""
    return (
        User.objects.filter(
            Q(groups__name__in=[OPERATOR, ADMIN]) | Q(is_superuser=True), is_active=True
        )
        .distinct()
        .order_by("username")
    )


class QueueFilter(django_filters.FilterSet):
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


_SHOWN = {
    CONFIRM: ("provider_ref", "evidence", "reason", "confirm"),
    FAIL: ("evidence", "reason", "confirm"),
    RETRY: ("verified_absent", "evidence", "reason", "confirm"),
    COMPENSATE: ("compensation_tool", "compensation_request", "force", "reason", "confirm"),
    CANCEL: ("reason", "confirm"),
    APPROVE: ("reason", "confirm"),
    REJECT: ("reason", "confirm"),
}


class DecisionForm(forms.Form):
    """One form for every decision; which fields matter depends on the action."""

    version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
    reason = forms.CharField(
        label="Reason", max_length=2000, widget=forms.Textarea(attrs={"rows": 2})
    )
    provider_ref = forms.CharField(label="Provider reference", max_length=500, required=False)
    evidence = forms.CharField(
        label="Evidence", max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    verified_absent = forms.BooleanField(
        label="I checked with the provider: it never received this request", required=False
    )
    compensation_tool = forms.CharField(label="Compensating tool", max_length=100, required=False)
    compensation_request = forms.CharField(
        label="Compensation request (JSON object)",
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 3, "class": "mono"}),
    )
    force = forms.BooleanField(
        label="Compensate even though downstream effects may have acted on it", required=False
    )
    confirm = forms.BooleanField(
        label="I have checked the evidence; this decision cannot be undone", required=True
    )

    def __init__(self, *args: Any, action: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.action = action
        if action == CONFIRM:
            self.fields["provider_ref"].required = True
        if action in (CONFIRM, FAIL):
            self.fields["evidence"].required = True

    def shown(self) -> list[forms.BoundField]:
        """The fields this action asks for, in order."""
        return [self[name] for name in _SHOWN[self.action]]

    def clean_compensation_request(self) -> dict[str, Any]:
        text = self.cleaned_data.get("compensation_request") or ""
        if not text.strip():
            return {}
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("The request must be a JSON object.")
        return value

    def to_ask(self) -> Ask:
        data = self.cleaned_data
        return Ask(
            action=self.action,
            reason=data["reason"],
            expected_version=data["version"],
            provider_ref=data.get("provider_ref") or "",
            evidence=data.get("evidence") or "",
            verified_absent=bool(data.get("verified_absent")) and self.action == RETRY,
            compensation_tool=(data.get("compensation_tool") or "")
            if self.action == COMPENSATE
            else "",
            compensation_request=data.get("compensation_request") or {},
            force=bool(data.get("force")) and self.action == COMPENSATE,
        )


def valid_action(action: str) -> bool:
    return action in ACTIONS


class UTCDateTimeField(forms.DateTimeField):
    """A `datetime-local` input, read as UTC (the form says so) whatever the server's zone."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")

    def to_python(self, value: Any) -> datetime | None:
        with timezone.override(UTC):
            return super().to_python(value)


class StatementUploadForm(forms.Form):
    tool = forms.ChoiceField(label="Tool")
    file = forms.FileField(
        label="Statement file",
        help_text="CSV or JSON Lines (.csv, .jsonl), as the provider sent it",
        error_messages={"required": "Choose the statement file to upload."},
    )
    period_start = UTCDateTimeField(label="Period start (UTC)")
    period_end = UTCDateTimeField(label="Period end (UTC, not included)")
    provisional = forms.BooleanField(
        label="Provisional: the provider may still change it (it proves no absence)",
        required=False,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only tools that declare statements; another name is refused as a wrong choice.
        names = Tool.objects.filter(statements=True).order_by("name").values_list("name", flat=True)
        self.fields["tool"].choices = [(name, name) for name in names]
        self.fields["file"].widget.attrs["accept"] = ".csv,.jsonl,.ndjson"

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("period_start"), data.get("period_end")
        if start and end and end <= start:
            self.add_error("period_end", "The period must end after it starts.")
        return data


class AcknowledgeForm(forms.Form):
    note = forms.CharField(
        label="What was found",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded with the decision; say what the charge was and what was done.",
    )
