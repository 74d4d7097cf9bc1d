"""Effects as the API shows them (API.md, "The effect object")."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db import connection

from ledger.models import Effect
from ledger.states import Status

Upstream = tuple[str, str]  # (id, status)


def upstreams_of(effect_ids: Iterable[Any]) -> dict[str, list[Upstream]]:
    """Each effect's upstream ids and statuses, for many effects in one query."""
    ids = list(effect_ids)
    found: dict[str, list[Upstream]] = defaultdict(list)
    if not ids:
        return found
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.downstream_id, u.id, u.status FROM ledger_effectdependency d "
            "JOIN ledger_effect u ON u.id = d.upstream_id "
            "WHERE d.downstream_id = ANY(%s) ORDER BY d.id",
            [ids],
        )
        for downstream, upstream, status in cursor.fetchall():
            found[str(downstream)].append((str(upstream), status))
    return found


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
        "depends_on": [uid for uid, _ in upstream],
        "blocked_by": [
            {"id": uid, "status": status} for uid, status in upstream if status != Status.CONFIRMED
        ],
        "parent_id": effect.parent_id,
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
