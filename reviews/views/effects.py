"""One effect on one page, and the decisions operators take on it."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from ledger import jsonenc
from ledger.errors import LedgerError, ValidationFailed
from ledger.models import (
    Effect,
    EffectDependency,
    EffectEvent,
    EventKind,
    ReviewItem,
    StatementLine,
)
from ledger.states import Kind
from ledger.tools import policy_for
from reconcilers.execution import can_execute
from reviews.access import actor, reader
from reviews.approvals import waits_for_second_pair
from reviews.decisions import COMPENSATE, allowed_actions
from reviews.decisions import decide as record_decision
from reviews.forms import DecisionForm, valid_action
from reviews.views.statements import shown_lines


def _pretty(value: Any) -> str:
    if value in (None, {}, []):
        return ""
    return json.dumps(json.loads(jsonenc.dumps(value)), indent=2, ensure_ascii=False)


def _suggested_compensation(effect: Effect) -> str:
    """A starting point for the compensation request: undo by the provider's reference."""
    request: dict[str, Any] = {}
    if effect.provider_ref:
        request["charge" if "amount" in (effect.request or {}) else "reference"] = (
            effect.provider_ref
        )
    if isinstance(effect.request, dict) and "amount" in effect.request:
        request["amount"] = effect.request["amount"]
    return _pretty(request) if request else "{}"


def _context(effect_id: uuid.UUID, user: Any, forms: dict[str, DecisionForm] | None = None) -> dict:
    effect = get_object_or_404(
        Effect.objects.select_related("agent", "parent", "parent__agent"), pk=effect_id
    )
    events = list(EffectEvent.objects.filter(effect=effect).order_by("id"))
    children = list(Effect.objects.filter(parent=effect).order_by("created_at", "id"))
    upstream = list(
        EffectDependency.objects.filter(downstream=effect)
        .select_related("upstream")
        .order_by("upstream__created_at")
    )
    downstream = list(
        EffectDependency.objects.filter(upstream=effect)
        .select_related("downstream")
        .order_by("downstream__created_at")
    )
    reviews = list(
        ReviewItem.objects.filter(effect=effect)
        .select_related("assignee", "resolved_by")
        .order_by("-opened_at")
    )
    # The provider's record of it: every line that names it, current or revised away, whatever
    # the statement's period (stmline_effect_idx).
    lines = shown_lines(
        StatementLine.objects.filter(effect_id=effect.pk)
        .select_related("statement")
        .order_by("statement__period_start", "statement_id", "line_no")
    )
    actions = allowed_actions(effect, user)
    waits, asker = waits_for_second_pair(effect)
    forms = forms or {}
    for action in actions:
        if action not in forms:
            initial: dict[str, Any] = {"version": effect.version}
            if action == COMPENSATE:
                initial["compensation_request"] = _suggested_compensation(effect)
                initial["compensation_tool"] = policy_for(effect.tool).compensated_by
            forms[action] = DecisionForm(initial=initial, action=action, auto_id=f"{action}_%s")
    return {
        "effect": effect,
        "events": events,
        "reconciliations": [e for e in events if e.kind == EventKind.RECONCILIATION],
        "statement_lines": lines,
        "decisions": [c for c in children if c.kind == Kind.DECISION],
        "compensations": [c for c in children if c.kind == Kind.COMPENSATION],
        "upstream": upstream,
        "downstream": downstream,
        "reviews": reviews,
        "open_review": next((r for r in reviews if r.resolved_at is None), None),
        "forms": [(action, forms[action]) for action in actions],
        # Four-eyes: who asked for what waits (the page tells them another operator decides).
        "four_eyes_asker": asker if waits else None,
        "executes": can_execute(effect.tool) if effect.kind == Kind.COMPENSATION else None,
        "request_json": _pretty(effect.request),
        "response_json": _pretty(effect.response),
        "error_json": _pretty(effect.error),
        "provenance_json": _pretty(effect.provenance),
    }


@require_GET
@reader
def detail(request: HttpRequest, effect_id: uuid.UUID) -> HttpResponse:
    return render(request, "reviews/effect.html", _context(effect_id, request.user))


@require_POST
@actor
def decide(request: HttpRequest, effect_id: uuid.UUID, action: str) -> HttpResponse:
    if not valid_action(action):
        raise Http404("No such decision.")
    get_object_or_404(Effect.objects.filter(~Q(kind=Kind.DECISION)), pk=effect_id)
    form = DecisionForm(request.POST, action=action, auto_id=f"{action}_%s")
    status, problem = 422, ""
    if form.is_valid():
        try:
            decided = record_decision(effect_id, form.to_ask(), user=request.user)
        except ValidationFailed as exc:
            for name, text in exc.extra.get("fields", {}).items():
                form.add_error(name if name in form.fields else None, text)
        except LedgerError as exc:
            status, problem = exc.status, exc.detail
        else:
            note = f"Decision recorded ({action}) as effect {decided.decision.id}."
            if decided.follow_up is not None:
                note += f" Compensation {decided.follow_up.id} recorded."
            messages.success(request, note)
            if request.htmx:
                context = _context(effect_id, request.user)
                return render(request, "reviews/effect.html#page", context)
            return redirect("effect", effect_id=effect_id)
    # A refusal (409) means the effect moved on: show it as it is now, with fresh forms.
    context = _context(effect_id, request.user, None if problem else {action: form})
    context["problem"], context["problem_action"] = problem, action
    template = "reviews/effect.html#page" if request.htmx else "reviews/effect.html"
    return render(request, template, context, status=status)
