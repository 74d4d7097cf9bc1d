"""What recovery will do for a run: the API's dry run, as a page.

`/runs/?run=<run_id>&agent=<name>` answers what the agent's `POST /recovery` with `dry_run`
would answer for the run, by calling the same function (`reviews.records.runs.preview`, which
calls `ledger.effects.recovery.recover` with `dry_run=True`): nothing is moved, queued or
opened. Without an agent, the run's own agents are looked up: one is taken, several are offered.
Read-only for every reader role.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from reviews.access.checks import reader
from reviews.records.runs import preview as run_preview
from reviews.records.runs import run_agent


class RunForm(forms.Form):
    run = forms.CharField(max_length=200, label="Run id")
    agent = forms.CharField(
        max_length=100, required=False, label="Agent", help_text="Empty: the run's own agent."
    )


@require_GET
@reader
def preview(request: HttpRequest) -> HttpResponse:
    if not request.GET:
        return render(request, "reviews/run.html", {"form": RunForm()})
    form = RunForm(request.GET)
    if not form.is_valid():
        return render(request, "reviews/run.html", {"form": form}, status=400)
    run_id, name = form.cleaned_data["run"], form.cleaned_data["agent"]
    context: dict[str, Any] = {"form": form, "run_id": run_id, "agent_name": name}
    # Runs of agents of other teams are not there for a scoped person (ADR 0014).
    agent, choices = run_agent(request.user, run_id, name)
    if not name:
        context["choices"] = choices
    if agent is None:
        # Another team's run is answered as a run nobody has (ADR 0014).
        return render(request, "reviews/run.html", context)
    limit = settings.LEDGER_RECOVERY_LIMIT
    shown = run_preview(request.user, agent, run_id, limit)
    context.update(
        agent=agent,
        rows=shown.rows,
        counts=shown.counts,
        summary=shown.summary,
        truncated=shown.truncated,
        limit=limit,
    )
    return render(request, "reviews/run.html", context)
