"""What the agent API answers, built from what the ledger's functions return: the effect
(docs/api.md#the-effect-object), a page of effects, a page of recovery plans, the health
check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledger.api.cursors import recovery_cursor
from ledger.api.health import Health
from ledger.effects.agentcalls import Answer
from ledger.effects.listing import Page
from ledger.effects.recovery import Recovered
from ledger.models import Effect
from ledger.rules.interlocks import Upstream, upstreams_of


def effect_dict(
    effect: Effect, agent_name: str, upstream: list[Upstream], *, claimer: bool = False
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": effect.id,
        "effect_key": effect.effect_key,
        "run_id": effect.run_id,
        "step_id": effect.step_id,
        "seq": effect.seq,
        "agent": agent_name,
        "tool": effect.tool,
        "target": effect.target,
        "kind": effect.kind,
        "status": effect.status,
        "attempt": effect.attempt,
        "max_attempts": effect.max_attempts,
        "idempotency_key": effect.idempotency_key,
        "lease_owner": effect.lease_owner,
        "lease_expires_at": effect.lease_expires_at,
        "provider_ref": effect.provider_ref,
        "request": effect.request,
        "response": effect.response,
        "error": effect.error,
        "depends_on": [u.id for u in upstream],
        "blocked_by": [u.shown() for u in upstream if u.blocking],
        "parent_id": effect.parent_id,
        "requested_by": effect.requested_by,
        "provenance": effect.provenance or {},
        "created_at": effect.created_at,
        "updated_at": effect.updated_at,
        "resolved_at": effect.resolved_at,
    }
    if claimer:
        data["lease_token"] = effect.lease_token
        data["lease_seconds"] = effect.lease_seconds
    return data


def answer_dict(answer: Answer, agent_name: str) -> dict[str, Any]:
    """The effect a call answers with; with its lease when the caller holds it."""
    return effect_dict(answer.effect, agent_name, answer.upstream, claimer=answer.claimed)


def effect_dicts(effects: list[Effect], agent_name: str) -> list[dict[str, Any]]:
    upstream = upstreams_of(e.id for e in effects)
    return [effect_dict(e, agent_name, upstream.get(str(e.id), [])) for e in effects]


def page_dict(page: Page, agent_name: str, cursor: Callable[[Effect], str]) -> dict[str, Any]:
    """A page of effects, and the cursor of the next page (`cursor` of the page's last effect)
    when one follows."""
    return {
        "items": effect_dicts(page.effects, agent_name),
        "next_cursor": cursor(page.effects[-1]) if page.more else None,
    }


def recovery_dict(page: Recovered, agent_name: str) -> dict[str, Any]:
    """A page of recovery plans: each effect with what to do and why, the counts by status,
    and the cursor of the next page."""
    shown = effect_dicts([item.effect for item in page.plans], agent_name)
    return {
        "effects": [
            {"effect": data, "action": item.plan.action, "reason": item.plan.reason}
            for item, data in zip(page.plans, shown, strict=True)
        ],
        "counts_by_status": page.counts,
        "next_cursor": recovery_cursor(page.next),
    }


def health_dict(health: Health) -> dict[str, Any]:
    """`/health`'s body: what answers, and restore mode when everything does."""
    body: dict[str, Any] = {
        "status": "ok" if health.ready else "unavailable",
        "database": "ok" if health.database else "unreachable",
        "redis": "ok" if health.redis else "unreachable",
    }
    if not health.ready:
        body.update(error="unavailable", detail="A backing service is not reachable.")
        return body
    window = health.restore_window
    body.update(restore_mode=window is not None)
    if window is not None:
        body.update(restore_lost_since=window.lost_since)
    return body
