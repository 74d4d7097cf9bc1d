"""Effects as the API shows them (docs/api.md#the-effect-object)."""

from __future__ import annotations

from typing import Any

from ledger.effects.interlocks import Upstream, upstreams_of
from ledger.models import Effect


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


def effect_dicts(effects: list[Effect], agent_name: str) -> list[dict[str, Any]]:
    upstream = upstreams_of(e.id for e in effects)
    return [effect_dict(e, agent_name, upstream.get(str(e.id), [])) for e in effects]
