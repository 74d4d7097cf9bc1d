"""The halts page: what is halted, and (operators, admins) halting and resuming: one view per
verb, each calling its namesake in `ledger.containment.halts`.

A run halt set by a person scoped to teams is narrowed to their teams (`halt_teams`): it stops
that run's agents of their teams and agents of no team, never another team's agent that uses
the same run id. Such a halt is resumed by its teams' operators, whoever has used the run since.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from ledger.containment import halts as halting
from ledger.errors import LedgerError, ValidationFailed
from ledger.models import Halt, HaltScope
from ledger.policy.roles import ADMIN
from ledger.policy.teams import any_team, teams_of
from ledger.rules import halts as halt_rules
from reviews.access.checks import actor, can_act, reader, roles_of
from reviews.access.counts import visible_halts
from reviews.access.teams import may_switch_halt
from reviews.records import halts as shown_halts

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


def halt_teams(user: User | AnonymousUser) -> frozenset[int] | None:
    """The teams a run halt this person sets is narrowed to: their own; None (every agent's)
    for an admin, and while no team exists."""
    if not any_team(user) or ADMIN in roles_of(user):
        return None
    return teams_of(user)


def _page(request: HttpRequest, form: HaltForm | None = None, status: int = 200) -> HttpResponse:
    context = {
        # Halts on other teams' tools, agents and narrowed runs are not shown (ADR 0014).
        "halts": shown_halts.active(request.user),
        "resumed": shown_halts.resumed(request.user),
        "form": form or (HaltForm(auto_id="halt_%s") if can_act(request.user) else None),
    }
    return render(request, "reviews/halts.html", context, status=status)


def _may_switch(request: HttpRequest, target: Halt) -> None:
    """Another team's tool, agent or narrowed run halt: 404, as one that does not exist.
    Something of no team, a run nobody of the person's teams owns, or everything: admins only
    (403), once teams exist."""
    if not visible_halts(request.user, [target]):
        raise Http404("No such tool or agent.")
    if not may_switch_halt(request.user, target):
        raise PermissionDenied(
            "Only an admin may set or resume this halt: it is global, or on something no team "
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
    _may_switch(request, Halt(scope=data["scope"], value=data["value"]))
    try:
        switched = halting.halt(
            data["scope"],
            data["value"],
            reason=data["reason"],
            by=request.user.get_username(),
            include_compensations=data["include_compensations"],
            teams=halt_teams(request.user),
        )
    except ValidationFailed as exc:
        for name, text in exc.extra.get("fields", {}).items():
            form.add_error(name if name in form.fields else None, text)
        return _page(request, form, 422)
    if switched.changed:
        messages.success(request, f"Halted. {halt_rules.described(switched.halt)}")
    else:
        described = halt_rules.described(switched.halt)
        messages.info(request, f"Already halted; nothing changed. {described}")
    return redirect("halts")


@require_POST
@actor
def resume(request: HttpRequest, halt_id: int) -> HttpResponse:
    form = ResumeForm(request.POST, auto_id=None)
    if not form.is_valid():
        messages.error(request, "Give a reason and tick the confirmation to resume.")
        return _page(request, status=422)
    target = shown_halts.halt_numbered(halt_id)
    if target is not None:
        _may_switch(request, target)
    try:
        switched = halting.resume(
            halt_id,
            reason=form.cleaned_data["reason"],
            by=request.user.get_username(),
            channel="page",
        )
    except LedgerError as exc:
        messages.error(request, exc.detail)
        return _page(request, status=exc.status)
    if switched.changed:
        messages.success(request, f"Resumed: halt {halt_id}.")
    else:
        messages.info(request, f"Halt {halt_id} was resumed already by {switched.halt.resumed_by}.")
    return redirect("halts")
