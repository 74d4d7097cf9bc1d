"""One effect on one page (read by `reviews.records.effect`), and the decisions operators take
on it."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger import jsonenc
from ledger.errors import LedgerError, ValidationFailed
from ledger.models import Effect, EffectEvent, EventKind, Reason, ReviewItem
from ledger.models.states import Kind
from reconcilers.execution import can_execute
from reviews.access.checks import actor, reader
from reviews.decisions.approvals import is_asker, waits_for_second_pair
from reviews.decisions.decide import AlreadyDecided
from reviews.decisions.decide import decide as decide_effect
from reviews.decisions.declaration import Action
from reviews.decisions.evidence import Evidence, evidence_in, provider_refs
from reviews.decisions.forms import DecisionForm, valid_action
from reviews.decisions.kinds import KINDS
from reviews.decisions.offer import allowed_actions
from reviews.decisions.preview import preview_for
from reviews.decisions.suggest import Suggestion, suggestion
from reviews.queue import notes
from reviews.queue.holds import hold_of, hold_text
from reviews.records.effect import (
    EffectRecord,
    compared,
    decision_taken,
    effect_to_decide,
    record_of,
)
from reviews.remote import emaillinks


def _pretty(value: Any) -> str:
    if value in (None, {}, []):
        return ""
    return json.dumps(json.loads(jsonenc.dumps(value)), indent=2, ensure_ascii=False)


# Event data longer than this many lines is folded in a <details> on the timeline.
FOLD_AFTER_LINES = 4


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
    record = record_of(user, effect_id)
    effect, events, open_item = record.effect, record.events, record.open_review
    evidence = evidence_in(events)
    return {
        **_as_recorded(record, evidence),
        "reviews": record.reviews,
        "open_review": open_item,
        "provider_refs": (
            provider_refs(effect, events)
            if open_item is not None and open_item.reason == Reason.DUPLICATE
            else []
        ),
        **_deciding(effect, evidence, open_item, user, forms or {}, opened),
        # Notes on the open item and who is working on it (reviews.queue.notes).
        **notes.panel(effect, open_item, user),
    }


def _as_recorded(record: EffectRecord, evidence: Evidence) -> dict[str, Any]:
    """The effect as the ledger holds it: its events, its provider's record, what it depends on
    and what depends on it, its decisions and compensations, and its payloads."""
    effect, events = record.effect, record.events
    return {
        "effect": effect,
        "events": events,
        "timeline": _timeline(events),
        "compared": compared(effect, evidence.record),
        "reconciliations": [e for e in events if e.kind == EventKind.RECONCILIATION],
        "statement_lines": record.statement_lines,
        "decisions": record.decisions,
        "compensations": record.compensations,
        "upstream": record.upstream,
        "downstream": record.downstream,
        "executes": can_execute(effect.tool) if effect.kind == Kind.COMPENSATION else None,
        "request_json": _pretty(effect.request),
        "response_json": _pretty(effect.response),
        "error_json": _pretty(effect.error),
        "provenance_json": _pretty(effect.provenance),
    }


def _deciding(
    effect: Effect,
    evidence: Evidence,
    open_item: ReviewItem | None,
    user: Any,
    forms: dict[str, DecisionForm],
    opened: str,
) -> dict[str, Any]:
    """The decisions offered to `user`, the suggested one (open, unless `opened` names
    another), and what they must know first: who holds the item, who asked for four-eyes."""
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


def _result(effect_id: uuid.UUID, decided: str) -> str:
    """The result of the decision `decided` (an id from the URL after a decision), or ""."""
    decision = decision_taken(effect_id, decided)
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
    effect = effect_to_decide(request.user, effect_id)
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
        # A form opened from an alert email's link records "email" (reviews.remote.emaillinks).
        channel = emaillinks.channel_of(request.session, effect_id, action)
        ask = replace(form.to_ask(), channel=channel)
        try:
            decided = decide_effect(effect_id, ask, user=request.user)
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
            emaillinks.decided(request.session, effect_id)
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
