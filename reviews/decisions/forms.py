"""The decision form: one form for every decision kind, showing the fields the kind asks for."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from reviews.decisions.declaration import Ask
from reviews.decisions.kinds import KINDS


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
    # Set when the asker confirmed deciding over another operator's hold on the item.
    over_hold = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, action: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.action = action
        self.kind = KINDS[action]
        for name in self.kind.required:
            self.fields[name].required = True

    def confirmed(self) -> bool:
        """Whether the asker confirmed the decision (valid forms only)."""
        return bool(self.cleaned_data.get("confirm"))

    def shown(self) -> list[forms.BoundField]:
        """The fields this action asks for, in order."""
        return [self[name] for name in self.kind.fields]

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
        """The ask, with the checkboxes and the compensating tool only where the kind shows
        them (a hidden field never decides)."""
        data, shown = self.cleaned_data, self.kind.fields
        return Ask(
            action=self.action,
            reason=data["reason"],
            expected_version=data["version"],
            provider_ref=data.get("provider_ref") or "",
            evidence=data.get("evidence") or "",
            verified_absent=bool(data.get("verified_absent")) and "verified_absent" in shown,
            compensation_tool=(data.get("compensation_tool") or "")
            if "compensation_tool" in shown
            else "",
            compensation_request=data.get("compensation_request") or {},
            force=bool(data.get("force")) and "force" in shown,
            # `over_claim`: the field's name on a page rendered before holds had their own
            # word, answered for one release.
            over_hold=bool(data.get("over_hold")) or self.data.get("over_claim") == "on",
        )


def valid_action(action: str) -> bool:
    return action in KINDS
