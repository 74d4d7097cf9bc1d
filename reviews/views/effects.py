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
from ledger.limits import value_at
from ledger.models import (
    Effect,
    EffectDependency,
    EffectEvent,
    EventKind,
    Reason,
    ReviewItem,
    StatementLine,
)
from ledger.states import Kind
from ledger.tools import policy_for
from reconcilers.execution import can_execute
from reviews import notes
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


# Event data longer than this many lines is folded in a <details> on the timeline.
FOLD_AFTER_LINES = 4
REDACTED = "redacted"


def _event_json(data: Any) -> str:
    """An event's data as an operator reads it: JSON, keys sorted, non-ASCII as written."""
    if data in (None, {}, []):
        return ""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _timeline(events: list[EffectEvent]) -> list[tuple[EffectEvent, str, bool]]:
    """Each event with its data as JSON, and whether that is long enough to fold away."""
    rows = []
    for event in events:
        shown = _event_json(event.data)
        rows.append((event, shown, shown.count("\n") >= FOLD_AFTER_LINES))
    return rows


def _redacted(value: Any) -> bool:
    return isinstance(value, dict) and value.get("redacted") is True


def _field(value: Any, path: str) -> str:
    """A field of a redacted-or-not payload as text: "redacted" when the payload was redacted
    (retention purges requests and records to `{"redacted": true}`), "—" when absent."""
    if _redacted(value):
        return REDACTED
    found = value_at(value, path)
    if found is None or found == "":
        return "—"
    return REDACTED if _redacted(found) else str(found)


# Row of the comparison: (label, the mismatch names that mark it differing).
_COMPARED_ROWS = (
    ("Amount", ("amount",)),
    ("Currency", ("currency",)),
    ("Target (account)", ("account", "target")),
    ("Status", ("status",)),
    ("Provider reference (id)", ("id", "provider_ref")),
)


def _compared(effect: Effect, events: list[EffectEvent]) -> dict[str, Any] | None:
    """Ours against the provider's record, from the latest event that carries one
    (a reconciliation, or a webhook held for review); None when no event does."""
    event = next(
        (e for e in reversed(events) if isinstance(e.data, dict) and "record" in e.data), None
    )
    if event is None:
        return None
    # Only now: the tool's paths are read (and cached) for effects that have a record.
    policy = policy_for(effect.tool)
    record = event.data["record"]
    mismatches = event.data.get("mismatches")
    differs = {str(m) for m in mismatches} if isinstance(mismatches, list) else set()
    request = effect.request
    ours = (
        _field(request, policy.amount_path or "amount"),
        _field(request, policy.currency_path or "currency"),
        effect.target or "—",
        effect.status,
        effect.provider_ref or "—",
    )
    account = "account" if value_at(record, "account") is not None else "target"
    theirs = (
        _field(record, "amount"),
        _field(record, "currency"),
        _field(record, account),
        _field(record, "status"),
        _field(record, "id"),
    )
    rows = [
        {"label": label, "ours": mine, "theirs": their, "differs": bool(differs & set(names))}
        for (label, names), mine, their in zip(_COMPARED_ROWS, ours, theirs, strict=True)
    ]
    return {"event": event, "rows": rows, "record_redacted": _redacted(record)}


def _provider_refs(effect: Effect, events: list[EffectEvent]) -> list[tuple[str, str]]:
    """Every provider reference the evidence names, once each, with where it was first seen:
    a duplicate is two references for one effect, and the operator compares them."""
    found: dict[str, str] = {}

    def add(ref: Any, where: str) -> None:
        if isinstance(ref, str) and ref and ref not in found:
            found[ref] = where

    add(effect.provider_ref, "recorded on the effect")
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        where = f"event {event.id} ({event.kind}, {event.actor})"
        refs = data.get("refs")
        for ref in refs if isinstance(refs, list) else []:
            add(ref, where)
        add(data.get("provider_ref"), where)
        add(data.get("recorded_ref"), f"{where}, as recorded")
    return list(found.items())


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
    open_item = next((r for r in reviews if r.resolved_at is None), None)
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
        "timeline": _timeline(events),
        "compared": _compared(effect, events),
        "provider_refs": (
            _provider_refs(effect, events)
            if open_item is not None and open_item.reason == Reason.DUPLICATE
            else []
        ),
        "reconciliations": [e for e in events if e.kind == EventKind.RECONCILIATION],
        "statement_lines": lines,
        "decisions": [c for c in children if c.kind == Kind.DECISION],
        "compensations": [c for c in children if c.kind == Kind.COMPENSATION],
        "upstream": upstream,
        "downstream": downstream,
        "reviews": reviews,
        "open_review": open_item,
        "forms": [(action, forms[action]) for action in actions],
        # Four-eyes: who asked for what waits (the page tells them another operator decides).
        "four_eyes_asker": asker if waits else None,
        "executes": can_execute(effect.tool) if effect.kind == Kind.COMPENSATION else None,
        "request_json": _pretty(effect.request),
        "response_json": _pretty(effect.response),
        "error_json": _pretty(effect.error),
        "provenance_json": _pretty(effect.provenance),
        # Notes on the open item and who is working on it (reviews.notes).
        **notes.panel(effect, open_item, user),
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
