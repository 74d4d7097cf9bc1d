"""The halts page: what is halted, and (operators, admins) halting and resuming: one view per
verb, each calling its namesake in `ledger.containment.halts`."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from ledger.containment import halts as kill_switch
from ledger.errors import LedgerError, ValidationFailed
from ledger.models import Halt, HaltScope
from reviews.access.checks import actor, can_act, reader
from reviews.access.counts import visible_halts
from reviews.access.teams import may_manage

CONFIRM_LABEL = "I understand that claims stop at once; this is recorded as a decision"


class HaltForm(forms.Form):
    scope = forms.ChoiceField(choices=HaltScope.choices, label="What to halt")
    value = forms.CharField(
        required=False,
        max_length=200,
        label="Name",
        help_text="The tool, the agent or the run_id; empty to halt everything.",
    )
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    include_compensations = forms.BooleanField(
        required=False, label="Also stop compensations (refunds) of what is halted"
    )
    confirm = forms.BooleanField(label=CONFIRM_LABEL)


class ResumeForm(forms.Form):
    reason = forms.CharField(max_length=2000, label="Reason for resuming")
    confirm = forms.BooleanField(label="Claims resume at once; this is recorded as a decision")


def _page(request: HttpRequest, form: HaltForm | None = None, status: int = 200) -> HttpResponse:
    lifted = Halt.objects.filter(lifted_at__isnull=False).order_by("-lifted_at")[:20]
    context = {
        # Halts on other teams' tools and agents are not shown (ADR 0014).
        "halts": visible_halts(request.user, kill_switch.active_halts()),
        "lifted": visible_halts(request.user, list(lifted)),
        "form": form or (HaltForm(auto_id="halt_%s") if can_act(request.user) else None),
    }
    return render(request, "reviews/halts.html", context, status=status)


def _may_switch(request: HttpRequest, scope: str, value: str) -> None:
    """Another team's tool or agent: 404, as one that does not exist. Something of no team, a
    run nobody of the person's teams owns, or everything: admins only (403), once teams exist."""
    if not visible_halts(request.user, [Halt(scope=scope, value=value)]):
        raise Http404("No such tool or agent.")
    if not may_manage(request.user, scope, value):
        raise PermissionDenied(
            "Only an admin may set or lift this halt: it is global, or on something no team "
            "of yours owns."
        )


@require_GET
@reader
def halts(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
@actor
def halt(request: HttpRequest) -> HttpResponse:
    form = HaltForm(request.POST, auto_id="halt_%s")
    if not form.is_valid():
        return _page(request, form, 422)
    data = form.cleaned_data
    _may_switch(request, data["scope"], data["value"])
    try:
        switched = kill_switch.halt(
            data["scope"],
            data["value"],
            reason=data["reason"],
            by=request.user.get_username(),
            include_compensations=data["include_compensations"],
        )
    except ValidationFailed as exc:
        for name, text in exc.extra.get("fields", {}).items():
            form.add_error(name if name in form.fields else None, text)
        return _page(request, form, 422)
    if switched.changed:
        messages.success(request, f"Halted. {kill_switch.described(switched.halt)}")
    else:
        described = kill_switch.described(switched.halt)
        messages.info(request, f"Already halted; nothing changed. {described}")
    return redirect("halts")


@require_POST
@actor
def resume(request: HttpRequest, halt_id: int) -> HttpResponse:
    form = ResumeForm(request.POST, auto_id=None)
    if not form.is_valid():
        messages.error(request, "Give a reason and tick the confirmation to resume.")
        return _page(request, status=422)
    target = Halt.objects.filter(pk=halt_id).first()
    if target is not None:
        _may_switch(request, target.scope, target.value)
    try:
        switched = kill_switch.resume(
            halt_id, reason=form.cleaned_data["reason"], by=request.user.get_username()
        )
    except LedgerError as exc:
        messages.error(request, exc.detail)
        return _page(request, status=exc.status)
    if switched.changed:
        messages.success(request, f"Resumed: halt {halt_id} lifted.")
    else:
        messages.info(request, f"Halt {halt_id} was lifted already by {switched.halt.lifted_by}.")
    return redirect("halts")
