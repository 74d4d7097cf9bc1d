"""What the operator API reads, as the token's person sees it on the pages: the review queue
of their teams (narrowed to the token's teams, when it names some) and one effect with the
decisions offered to them. Another team's effect is not there (a 404, as on the pages)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db.models import QuerySet

from ledger.errors import NotFound
from ledger.models import Effect, ReviewItem
from ledger.observability import logcontext
from ledger.policy.iso4217 import major_units
from ledger.policy.teams import effects_q
from reviews.decisions.approvals import is_asker, waits_for_second_pair
from reviews.decisions.evidence import evidence_of
from reviews.decisions.kinds import KINDS
from reviews.decisions.offer import allowed_actions, open_item
from reviews.decisions.preview import preview_for
from reviews.decisions.suggest import Suggestion, suggestion
from reviews.models import OperatorToken as Token
from reviews.operatorapi.schemas import DecisionIn, QueueQuery
from reviews.operatorapi.tokens import team_scope
from reviews.queue.holds import hold_of
from reviews.queue.pages import dress, rows


def _visible(token: Token, qs: QuerySet[Any], prefix: str = "") -> QuerySet[Any]:
    scope = team_scope(token)
    return qs if scope is None else qs.filter(effects_q(scope, prefix))


def _amount(effect: Effect) -> str | None:
    if effect.amount_minor is None or not effect.currency:
        return None
    return major_units(effect.amount_minor, effect.currency)


def _row(item: ReviewItem) -> dict[str, Any]:
    effect, suggested = item.effect, item.suggested  # type: ignore[attr-defined]
    return {
        "item": item.pk,
        "effect_id": effect.pk,
        "effect_key": effect.effect_key,
        "reason": item.reason,
        "severity": item.get_severity_display(),
        "opened_at": item.opened_at,
        "due_at": item.due_at,
        "tool": effect.tool,
        "agent": item.agent.name if item.agent else "",
        "target": effect.target,
        "status": effect.status,
        "version": effect.version,
        "amount": _amount(effect),
        "currency": effect.currency or None,
        "assignee": item.assignee.get_username() if item.assignee else None,
        "suggested": suggested.action if suggested else None,
        "suggested_label": suggested.label if suggested else None,
    }


def queue_page(token: Token, filters: QueueQuery) -> dict[str, Any]:
    """A page of the open items the token's person sees, oldest first, from `filters.cursor`."""
    items = _visible(token, ReviewItem.objects.filter(resolved_at__isnull=True), "effect__")
    if filters.reason is not None:
        items = items.filter(reason=filters.reason)
    if filters.tool is not None:
        items = items.filter(tool=filters.tool)
    if filters.cursor:
        items = items.filter(pk__gt=int(filters.cursor))
    ids = list(items.order_by("id").values_list("id", flat=True)[: filters.limit + 1])
    shown = rows(ids[: filters.limit])
    dress(shown)
    more = len(ids) > filters.limit
    return {
        "items": [_row(item) for item in shown],
        "next_cursor": str(ids[filters.limit - 1]) if more else None,
    }


def _summary(effect: Effect) -> dict[str, Any]:
    fields = (
        "effect_key",
        "kind",
        "tool",
        "target",
        "run_id",
        "status",
        "version",
        "attempt",
        "max_attempts",
        "provider_ref",
        "requested_by",
        "created_at",
        "updated_at",
    )
    return {
        "id": effect.pk,
        "agent": effect.agent.name,
        "amount": _amount(effect),
        "currency": effect.currency or None,
        **{name: getattr(effect, name) for name in fields},
    }


def _offered(effect: Effect, action: str) -> dict[str, Any]:
    kind, preview = KINDS[action], preview_for(effect, action)
    return {
        "action": action,
        "label": kind.label,
        "dangerous": kind.dangerous,
        "fields": list(kind.fields),
        "required": sorted(kind.required),
        "question": kind.question_for(effect),
        "preview": {
            "status": preview.status,
            "actor": preview.actor,
            "lines": [vars(line) for line in preview.lines],
            "money_moves": preview.money_moves,
        },
    }


def _ready(effect: Effect, suggested: Suggestion) -> dict[str, Any]:
    """The suggestion as a body for `POST …/decisions`: what the page's form pre-fills."""
    kind = KINDS[suggested.action]
    initial = dict(kind.initial(effect)) if kind.initial is not None else {}
    initial.update(suggested.initial)
    request = initial.get("compensation_request")
    if isinstance(request, str):
        try:
            initial["compensation_request"] = json.loads(request or "{}")
        except ValueError:
            initial.pop("compensation_request")
    known = set(DecisionIn.model_fields)
    shown = {name: value for name, value in initial.items() if name in known}
    return {**shown, "action": suggested.action, "expected_version": effect.version}


def item_view(token: Token, effect_id: uuid.UUID) -> dict[str, Any]:
    """One effect as the token's person sees it: its open item, the decisions offered to them
    with their previews, the suggested one as a ready body, and where four-eyes stands."""
    effect = _visible(token, Effect.objects.select_related("agent")).filter(pk=effect_id).first()
    if effect is None:
        raise NotFound("No such effect.")
    logcontext.bind(effect_id=effect.pk, run_id=effect.run_id)
    open_one = open_item(effect)
    evidence = evidence_of(effect.pk)
    actions = allowed_actions(effect, token.user, item=open_one, evidence=evidence)
    suggested = suggestion(effect, open_one, evidence)
    if suggested is not None and suggested.action not in actions:
        suggested = None
    waits, asker = waits_for_second_pair(effect)
    return {
        "effect": _summary(effect),
        "item": _item_part(open_one),
        "actions": [_offered(effect, action) for action in actions],
        "suggested": None
        if suggested is None
        else {
            "action": suggested.action,
            "label": suggested.label,
            "ask": _ready(effect, suggested),
        },
        "four_eyes": {
            "waits": waits,
            "asked_by": asker if waits else "",
            "yours": waits and is_asker(asker, token.user),
        },
    }


def _item_part(open_one: ReviewItem | None) -> dict[str, Any] | None:
    if open_one is None:
        return None
    hold = hold_of(open_one)
    return {
        "id": open_one.pk,
        "reason": open_one.reason,
        "severity": open_one.get_severity_display(),
        "opened_at": open_one.opened_at,
        "due_at": open_one.due_at,
        "assignee": open_one.assignee.get_username() if open_one.assignee else None,
        "held_by": hold.held_by.get_username() if hold else None,
    }
