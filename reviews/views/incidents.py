"""The incidents page: what the provider did that no effect asked for (statement lines no effect
intended, possible unauthorized charges), gravest first, and (operators, admins) acknowledging
one, recorded as a decision by `ledger.statements.acknowledge_incident`."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from ledger.errors import LedgerError, ValidationFailed
from ledger.statements import acknowledge_incident
from reviews.access.checks import actor, can_act, reader
from reviews.records import incidents as shown

PAGE_SIZE = 50
RECENT = 50


class AcknowledgeForm(forms.Form):
    note = forms.CharField(
        label="What was found",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded with the decision; say what the charge was and what was done.",
    )


def _form(incident_id: int, data: dict | None = None) -> AcknowledgeForm:
    return AcknowledgeForm(data, auto_id=f"ack{incident_id}_%s")


def _page(
    request: HttpRequest,
    failed: tuple[int, AcknowledgeForm] | None = None,
    status: int = 200,
) -> HttpResponse:
    """The page; `failed` is an incident's acknowledge form that was refused, to show again."""
    # Incidents of other teams' tools are not shown (ADR 0014).
    page = shown.open_page(request.user, request.GET.get("page"), PAGE_SIZE)
    acting = can_act(request.user)
    rows = []
    for incident in page:
        form = None
        if acting:
            form = failed[1] if failed and failed[0] == incident.pk else _form(incident.pk)
        rows.append((incident, form))
    acknowledged = shown.acknowledged(request.user, RECENT)
    context = {"page": page, "rows": rows, "acknowledged": acknowledged, "recent": RECENT}
    return render(request, "reviews/incidents.html", context, status=status)


@require_GET
@reader
def incidents(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
@actor
def acknowledge(request: HttpRequest, incident_id: int) -> HttpResponse:
    incident = shown.incident_or_404(request.user, incident_id)
    form = _form(incident.pk, request.POST)
    if not form.is_valid():
        return _page(request, (incident.pk, form), 422)
    try:
        done = acknowledge_incident(incident.pk, user=request.user, note=form.cleaned_data["note"])
    except ValidationFailed as exc:
        form.add_error("note", exc.detail)
        return _page(request, (incident.pk, form), 422)
    except LedgerError as exc:
        # Someone else acknowledged it first: the page as it is now, saying who.
        messages.error(request, exc.detail)
        return _page(request, status=exc.status)
    messages.success(
        request,
        f"Incident {done.pk} acknowledged ({done.line.provider_ref}); recorded as decision "
        f"{done.decision_id}.",
    )
    return redirect("incidents")
