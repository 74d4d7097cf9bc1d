"""Forms of the operator pages: the decisions, statement uploads and
incident acknowledgements."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.utils import timezone

from ledger.models import Tool
from reviews.decisions import (
    ACCEPT_RECORD,
    ACTIONS,
    APPROVE,
    CANCEL,
    COMPENSATE,
    CONFIRM,
    EXTRA_ATTEMPT,
    FAIL,
    NEEDS_EVIDENCE,
    NOT_DUPLICATE,
    REJECT,
    RETRY,
    Ask,
)

_SHOWN = {
    CONFIRM: ("provider_ref", "evidence", "reason"),
    FAIL: ("evidence", "reason"),
    RETRY: ("verified_absent", "evidence", "reason"),
    COMPENSATE: ("compensation_tool", "compensation_request", "force", "reason"),
    CANCEL: ("reason",),
    APPROVE: ("reason",),
    REJECT: ("reason",),
    NOT_DUPLICATE: ("evidence", "reason"),
    ACCEPT_RECORD: ("evidence", "reason"),
    EXTRA_ATTEMPT: ("reason",),
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
    # Set by the confirmation (the page's dialog, or the server's confirmation step without
    # JavaScript): a decision cannot be undone, so it is never recorded on the first click.
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)
    # Set when the asker confirmed deciding over another operator's claim on the item.
    over_claim = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, action: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.action = action
        if action == CONFIRM:
            self.fields["provider_ref"].required = True
        if action in NEEDS_EVIDENCE:
            self.fields["evidence"].required = True

    def confirmed(self) -> bool:
        """Whether the asker confirmed the decision (valid forms only)."""
        return bool(self.cleaned_data.get("confirm"))

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
            over_claim=bool(data.get("over_claim")),
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
