"""One effect on one page, and the decisions operators take on it."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger import jsonenc
from ledger.containment.limits import value_at
from ledger.effects.states import Kind
from ledger.errors import LedgerError, ValidationFailed
from ledger.models import (
    Effect,
    EffectDependency,
    EffectEvent,
    EventKind,
    Reason,
    ReviewItem,
    StatementLine,
)
from ledger.policy.tools import policy_for
from reconcilers.execution import can_execute
from reviews.access.checks import actor, reader
from reviews.access.teams import effect_or_404
from reviews.decisions.approvals import is_asker, waits_for_second_pair
from reviews.decisions.decide import AlreadyDecided
from reviews.decisions.decide import decide as record_decision
from reviews.decisions.declaration import Action
from reviews.decisions.evidence import Evidence, provider_refs
from reviews.decisions.forms import DecisionForm, valid_action
from reviews.decisions.kinds import KINDS
from reviews.decisions.offer import allowed_actions
from reviews.decisions.preview import preview_for
from reviews.decisions.suggest import Suggestion, suggestion
from reviews.queue import notes
from reviews.queue.holds import hold_of, hold_text
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


def _decisions(
    effect: Effect,
    actions: list[Action],
    forms: dict[str, DecisionForm],
    suggested: Suggestion | None,
    opened: str,
) -> list[dict[str, Any]]:
    """Each offered decision: its form (pre-filled where it is the suggested one), its
    confirmation question, what happens after it, whether it is dangerous and whether it
    starts open. All of it but the form's values is the kind's declaration."""
    for action in actions:
        if action not in forms:
            kind = KINDS[action]
            initial: dict[str, Any] = {"version": effect.version}
            if kind.initial is not None:
                initial.update(kind.initial(effect))
            if suggested is not None and suggested.action == action:
                initial.update(suggested.initial)
            forms[action] = DecisionForm(initial=initial, action=action, auto_id=f"{action}_%s")
    # The open decision (asked for, or suggested) first: on a phone it is the one in view.
    ordered = sorted(actions, key=lambda a: a != opened)
    return [
        {
            "action": action,
            "form": forms[action],
            "label": KINDS[action].label,
            "dangerous": KINDS[action].dangerous,
            "question": KINDS[action].question_for(effect),
            "preview": preview_for(effect, action),
            "suggested": suggested is not None and suggested.action == action,
            "open": action == opened or bool(forms[action].errors),
        }
        for action in ordered
    ]


def _context(
    effect_id: uuid.UUID,
    user: Any,
    forms: dict[str, DecisionForm] | None = None,
    *,
    opened: str = "",
) -> dict:
    """Everything the effect page shows: the effect and what surrounds it, and, around its open
    review item, the decisions offered and who is working on it."""
    # Another team's effect is a 404, like a missing one (ADR 0014).
    effect = effect_or_404(
        user, effect_id, Effect.objects.select_related("agent", "parent", "parent__agent")
    )
    events = list(EffectEvent.objects.filter(effect=effect).order_by("id"))
    reviews = list(
        ReviewItem.objects.filter(effect=effect)
        .select_related("assignee", "resolved_by")
        .order_by("-opened_at")
    )
    open_item = next((r for r in reviews if r.resolved_at is None), None)
    return {
        **_as_recorded(effect, events),
        "reviews": reviews,
        "open_review": open_item,
        "provider_refs": (
            provider_refs(effect, events)
            if open_item is not None and open_item.reason == Reason.DUPLICATE
            else []
        ),
        **_deciding(effect, events, open_item, user, forms or {}, opened),
        # Notes on the open item and who is working on it (reviews.queue.notes).
        **notes.panel(effect, open_item, user),
    }


def _as_recorded(effect: Effect, events: list[EffectEvent]) -> dict[str, Any]:
    """The effect as the ledger holds it: its events, its provider's record, what it depends on
    and what depends on it, its decisions and compensations, and its payloads."""
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
    # The provider's record of it: every line that names it, current or revised away, whatever
    # the statement's period (stmline_effect_idx).
    lines = shown_lines(
        StatementLine.objects.filter(effect_id=effect.pk)
        .select_related("statement")
        .order_by("statement__period_start", "statement_id", "line_no")
    )
    return {
        "effect": effect,
        "events": events,
        "timeline": _timeline(events),
        "compared": _compared(effect, events),
        "reconciliations": [e for e in events if e.kind == EventKind.RECONCILIATION],
        "statement_lines": lines,
        "decisions": [c for c in children if c.kind == Kind.DECISION],
        "compensations": [c for c in children if c.kind == Kind.COMPENSATION],
        "upstream": upstream,
        "downstream": downstream,
        "executes": can_execute(effect.tool) if effect.kind == Kind.COMPENSATION else None,
        "request_json": _pretty(effect.request),
        "response_json": _pretty(effect.response),
        "error_json": _pretty(effect.error),
        "provenance_json": _pretty(effect.provenance),
    }


def _deciding(
    effect: Effect,
    events: list[EffectEvent],
    open_item: ReviewItem | None,
    user: Any,
    forms: dict[str, DecisionForm],
    opened: str,
) -> dict[str, Any]:
    """The decisions offered to `user`, the suggested one (open, unless `opened` names
    another), and what they must know first: who holds the item, who asked for four-eyes."""
    evidence = _evidence(events)
    actions = allowed_actions(effect, user, item=open_item, evidence=evidence)
    suggested = suggestion(effect, open_item, evidence)
    if suggested is not None and suggested.action not in actions:
        suggested = None
    # ?decide=<action> opens that decision; otherwise the suggested one is open, ready.
    if opened not in actions:
        opened = suggested.action if suggested is not None else ""
    waits, asker = waits_for_second_pair(effect)
    hold = hold_of(open_item)
    held_by_other = hold is not None and hold.held_by.pk != getattr(user, "pk", None)
    return {
        "decisions_offered": _decisions(effect, actions, forms, suggested, opened),
        "suggested": suggested,
        # Another operator holds the open item: deciding over their hold is confirmed first.
        "held": hold_text(hold) if held_by_other else "",
        # Four-eyes: who asked for what waits (the page tells them another operator decides).
        "four_eyes_asker": asker if waits else None,
        "four_eyes_mine": waits and is_asker(asker, user),
    }


def _evidence(events: list[EffectEvent]) -> Evidence:
    """The latest lookup and provider record, from the events the page has read already."""
    return Evidence(
        lookup=next((e for e in reversed(events) if e.kind == EventKind.RECONCILIATION), None),
        record=next(
            (e for e in reversed(events) if isinstance(e.data, dict) and "record" in e.data), None
        ),
    )


def _result(effect_id: uuid.UUID, decided: str) -> str:
    """The result of the decision `decided` (an id from the URL after a decision), or ""."""
    try:
        decision = Effect.objects.filter(
            pk=uuid.UUID(decided), parent_id=effect_id, kind=Kind.DECISION
        ).first()
    except ValueError:
        return ""
    if decision is None:
        return ""
    text = f"Decision recorded ({decision.provenance.get('action')}) as effect {decision.id}."
    if follow_up := decision.provenance.get("compensation"):
        text += f" Compensation {follow_up} recorded."
    return text


@require_GET
@reader
def detail(request: HttpRequest, effect_id: uuid.UUID) -> HttpResponse:
    context = _context(effect_id, request.user, opened=request.GET.get("decide", ""))
    context["result"] = _result(effect_id, request.GET.get("decided", ""))
    return render(request, "reviews/effect.html", context)


@require_POST
@actor
def decide(request: HttpRequest, effect_id: uuid.UUID, action: str) -> HttpResponse:
    """Record the decision once it is confirmed; an unconfirmed post (no JavaScript, so no
    dialog) gets the confirmation step, the same question the dialog asks."""
    if not valid_action(action):
        raise Http404("No such decision.")
    effect = effect_or_404(request.user, effect_id, Effect.objects.filter(~Q(kind=Kind.DECISION)))
    form = DecisionForm(request.POST, action=action, auto_id=f"{action}_%s")
    template = "reviews/effect.html#page" if request.htmx else "reviews/effect.html"
    status, problem = 422, ""
    if form.is_valid() and not form.confirmed():
        context = _context(effect_id, request.user, {action: form}, opened=action)
        ref = form.cleaned_data.get("provider_ref") or ""
        context["confirm_step"] = {
            "action": action,
            "label": KINDS[action].label,
            "form": form,
            "question": KINDS[action].question_for(effect, ref),
            "preview": preview_for(effect, action),
        }
        return render(request, template, context)
    if form.is_valid():
        ask = form.to_ask()
        try:
            decided = record_decision(effect_id, ask, user=request.user)
        except ValidationFailed as exc:
            for name, text in exc.extra.get("fields", {}).items():
                form.add_error(name if name in form.fields else None, text)
        except AlreadyDecided as exc:
            # The loser's evidence is not lost: it stays on the item as a note.
            notes.keep_lost_decision(effect_id, request.user, ask, exc)
            status = exc.status
            problem = f"{exc.detail} Your evidence was kept as a note on the item."
        except LedgerError as exc:
            status, problem = exc.status, exc.detail
        else:
            if not request.htmx:
                url = reverse("effect", kwargs={"effect_id": effect_id})
                return redirect(f"{url}?decided={decided.decision.id}")
            context = _context(effect_id, request.user)
            context["result"] = _result(effect_id, str(decided.decision.id))
            return render(request, "reviews/effect.html#page", context)
    # A refusal (409) means the effect moved on: show it as it is now, with fresh forms.
    context = _context(effect_id, request.user, None if problem else {action: form}, opened=action)
    context["problem"], context["problem_action"] = problem, action
    return render(request, template, context, status=status)
