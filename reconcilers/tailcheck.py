"""Tail checks: one more lookup for an effect that was sent again on a proof of absence.

A proof of absence (`ledger.rules.lookup_absence`) rests on the provider's search being complete;
if a first request landed after all (a partition that outlasted every bound), the retry made a
second
record. So an effect moved on such a proof carries `tail_check_at`, and once it has resolved
and `settle_after + call_timeout` more have passed, the provider is asked once more:

| the provider lists under our reference | then                                              |
| -------------------------------------- | ------------------------------------------------- |
| two or more records                    | review (duplicate, high); the tool halted if it   |
|                                        | declares halt_on_duplicate                        |
| one record, another ref than ours      | the same: it may hold two                          |
| one record of a failed/cancelled one   | review (the provider's record contradicts ours)   |
| what we recorded, or nothing at all    | done                                              |
| inconclusive                           | asked again later                                 |

A tool without a lookup is left to its next statement, which matches every effect by
reference whatever its period (`ledger.statements`). Taking work is the checker's pattern: a
conditional UPDATE pushes `tail_check_at` a check-lease ahead (SKIP LOCKED lets several
workers pass each other), the provider is asked outside any transaction, and the answer is
recorded in one.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from ledger.containment.duplicates import report_duplicate
from ledger.effects.recovery import database_now
from ledger.models import Effect, EventKind, Reason, Tool
from ledger.models.states import TERMINAL, Status
from ledger.policy.tools import Policy
from ledger.rules.events import record_event
from ledger.rules.lookup_absence import tail_check_due
from ledger.rules.reviewqueue import open_review
from reconcilers.providers import adapter_for
from reconcilers.providers.outcomes import DUPLICATE, FOUND, INCONCLUSIVE, Lookup
from reconcilers.reconcile import lookup_pool

log = logging.getLogger(__name__)

ACTOR = "system:tail-check"
_TABLE = Effect._meta.db_table
# Effects one run takes: the schedule runs every sweep period and takes what is due.
BATCH = 100


def take_due(limit: int = BATCH) -> list[Effect]:
    """Take due tail checks nobody else has, in one statement (served by effect_tail_check_idx)."""
    return list(
        Effect.objects.raw(
            f"UPDATE {_TABLE} SET tail_check_at = now() + make_interval(secs => %s) "
            f"WHERE id IN (SELECT id FROM {_TABLE} WHERE tail_check_at <= now() "
            "ORDER BY tail_check_at LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING *",
            [settings.LEDGER_CHECK_LEASE, limit],
        )
    )


def run_due(limit: int = BATCH) -> dict[str, int]:
    """The schedule's entry point: check what is due. Returns counts by what was found."""
    effects = take_due(limit)
    if not effects:
        return {}
    tools = {t.name: t for t in Tool.objects.filter(name__in={e.tool for e in effects})}
    now = database_now()
    counts: dict[str, int] = {}
    ready: list[Effect] = []
    for effect in effects:
        tool = tools.get(effect.tool)
        policy = Policy.from_tool(tool) if tool else Policy.unsafe(effect.tool)
        if effect.status not in TERMINAL or effect.resolved_at is None:
            # Not resolved yet (it is being sent again): look once it has.
            _set(effect, tail_check_due(policy, now))
            counts["waiting"] = counts.get("waiting", 0) + 1
        elif now < tail_check_due(policy, effect.resolved_at):
            _set(effect, tail_check_due(policy, effect.resolved_at))
            counts["waiting"] = counts.get("waiting", 0) + 1
        elif tool is None or not tool.has_lookup:
            _set(effect, None)  # its next statement covers it
            counts["left_to_statement"] = counts.get("left_to_statement", 0) + 1
        else:
            ready.append(effect)
    answers = list(lookup_pool.map(lambda e: adapter_for(tools[e.tool]).lookup(e), ready))
    for effect, answer in zip(ready, answers, strict=True):
        outcome = _record(effect, Policy.from_tool(tools[effect.tool]), answer, now)
        counts[outcome] = counts.get(outcome, 0) + 1
    log.info("tail checks: %s", counts)
    return counts


def _record(effect: Effect, policy: Policy, answer: Lookup, now: datetime) -> str:
    """Record one answer and what follows from it; returns what it was judged to be."""
    redact = policy.redactor.text
    if answer.outcome == INCONCLUSIVE:
        _set(effect, now + timedelta(seconds=settings.LEDGER_BACKOFF_CAP))
        return "inconclusive"
    with transaction.atomic():
        record_event(
            effect.id,
            kind=EventKind.RECONCILIATION,
            actor=ACTOR,
            from_status=effect.status,
            to_status=effect.status,
            reason=answer.outcome,
            data={**answer.evidence(), "tail_check": True},
        )
        other_ref = (
            answer.outcome == FOUND
            and effect.provider_ref
            and redact(answer.provider_ref) != effect.provider_ref
        )
        if answer.outcome == DUPLICATE or other_ref:
            refs = list(answer.refs) or [answer.provider_ref]
            report_duplicate(
                effect.id,
                effect.tool,
                status=effect.status,
                actor=ACTOR,
                evidence={"refs": [redact(r) for r in refs], "ours": effect.provider_ref},
            )
            verdict = "duplicate"
        elif answer.outcome == FOUND and effect.status in (Status.FAILED, Status.CANCELLED):
            open_review(effect.id, Reason.STATEMENT_CONTRADICTS)
            verdict = "contradicts"
        else:
            verdict = "clean"
        _set(effect, None)
    return verdict


def _set(effect: Effect, when: datetime | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {_TABLE} SET tail_check_at = %s WHERE id = %s", [when, effect.id])
