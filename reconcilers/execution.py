"""Carrying out effects the ledger originates itself: compensations an operator asked for.

Each is claimed like any other effect (lease and fencing token), sent through its tool's adapter
outside any transaction, and its outcome recorded under the lease. A worker that dies midway
leaves a lease that runs out; reconciliation then asks the provider by key before anything is
sent again. Wake-ups travel through Redis after commit; the sweep re-drives what Redis lost.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from ledger.effects.outcomes import record_outcome
from ledger.effects.transitions import claim
from ledger.errors import AttemptsExhausted, Refused, StaleLease
from ledger.models import Effect, Reason, Tool
from ledger.models.states import Kind, Status
from ledger.policy.tools import policy_for
from ledger.rules.halts import covering_sql
from ledger.rules.limits import LimitExceeded
from ledger.rules.reviewqueue import open_review
from reconcilers.jobqueue import enqueue, fresh_connection
from reconcilers.providers import adapter_for, executes, executing

log = logging.getLogger(__name__)

ACTOR = "system:executor"
OWNER = "ledger-executor"
LEASE_SECONDS = 120


def can_execute(tool_name: str) -> bool:
    reconciler = Tool.objects.filter(name=tool_name).values_list("reconciler", flat=True).first()
    return bool(reconciler) and executes(reconciler)


def _enqueue(effect_ids: list[str]) -> bool:
    return enqueue("execute-compensation", [(effect_id,) for effect_id in effect_ids])


def execute_after_commit(effect_id: Any) -> None:
    transaction.on_commit(lambda: _enqueue([str(effect_id)]), robust=True)


def execute(effect_id: Any) -> bool:
    """The rq job (`execute-compensation`, reconcilers/tasks.py)."""
    fresh_connection()
    return execute_one(effect_id)


def execute_one(effect_id: Any) -> bool:
    """Claim, send and record one planned compensation. Returns whether this call sent it."""
    effect = Effect.objects.filter(
        pk=effect_id, kind=Kind.COMPENSATION, status=Status.PLANNED
    ).first()
    if effect is None:
        return False
    adapter = adapter_for(Tool.objects.filter(name=effect.tool).first())
    if not hasattr(adapter, "execute"):
        return False
    policy = policy_for(effect.tool)
    # Never shorter than the tool's call_timeout: the call must end inside the lease. Never
    # longer than the deployment's bound either: restore mode reaches back that far.
    lease_seconds = max(
        min(LEASE_SECONDS, settings.LEDGER_MAX_LEASE_SECONDS), policy.lease_for(None)
    )
    try:
        effect, _ = claim(
            effect, owner=OWNER, claim_id=None, lease_seconds=lease_seconds, actor=ACTOR
        )
    except AttemptsExhausted:
        open_review(effect.id, Reason.ATTEMPTS_EXHAUSTED)
        return False
    except Refused:
        # Someone else claimed or moved it first, or a halt covers it: the redrive skips it
        # until the halt is resumed.
        return False
    except LimitExceeded as limited:
        # Its tool's limit is reached: it stays planned, and the redrive tries again later.
        limited.alert()
        return False
    sent = adapter.execute(effect)
    try:
        record_outcome(
            effect,
            token=effect.lease_token or "",
            status=sent.status,
            provider_ref=sent.provider_ref,
            response=sent.response,
            error=sent.error,
            actor=ACTOR,
            policy=policy,
        )
    except StaleLease:
        log.warning(
            "lease on %s ran out while it was being sent; reconciliation decides", effect.id
        )
    return True


def redrive_executions(limit: int = 1000) -> int:
    """Re-enqueue planned compensations whose tool can execute them (a wake-up lost from Redis
    or a not_sent outcome waiting for another go), except those a halt covers: they wait for
    the resume (the claim would refuse them anyway). Returns how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id FROM {Effect._meta.db_table} e "
            f"JOIN {Tool._meta.db_table} t ON t.name = e.tool "
            f"WHERE e.kind = '{Kind.COMPENSATION.value}' AND e.status = '{Status.PLANNED.value}' "
            f"AND e.attempt < e.max_attempts AND t.reconciler = ANY(%s) "
            f"AND {covering_sql('e')} IS NULL "
            f"ORDER BY e.created_at LIMIT %s",
            [executing(), limit],
        )
        ids = [str(row[0]) for row in cursor.fetchall()]
    if ids:
        _enqueue(ids)
    return len(ids)
