"""Reconciliation: deciding what happened to an effect whose outcome nobody reported.

The database is the queue of record: an effect that needs checking carries `next_check_at`. A
checker takes it with a conditional UPDATE that pushes `next_check_at` a check-lease ahead (so
any number of workers can run side by side, and a checker that dies only delays the effect),
asks the provider *outside* any transaction, then records the answer and its consequence in
one transaction. A transition loses, harmlessly, to anyone who moved the effect meanwhile.

A batch's common answers (found and matching; not found where that proves non-receipt) are
each one transition, and they are written together: `ledger.effects.transitions.transition_many`
moves them with their reconciliation and transition events in one statement per kind of move, so
an effect that moved meanwhile is left out with no trace. The other answers (a review, a
reschedule, a chain of moves) are recorded one by one, each in a savepoint.

What an answer leads to (docs/concepts.md#recovery):

| answer                  | then                                                                |
| ----------------------- | ------------------------------------------------------------------- |
| found, matches request  | confirmed / failed as the provider says; pending → awaiting         |
| found, differs          | unknown, review (provider_mismatch)                                 |
| two or more records     | unknown, review (duplicate, high); the tool halted if it says so    |
| not found, proves       | planned while attempts remain, else failed (never_sent); a tail     |
|   absence               |   check after it next resolves (`ledger.rules.lookup_absence`)   |
| not found, not yet      | asked again once it could prove absence                             |
| not found, never        | unknown, review (not_found_unproven)                                |
| inconclusive            | unknown, retried with backoff and jitter, then review               |
| (no lookup at all)      | the capability table in ledger.effects.recovery                     |
"""

from __future__ import annotations

import logging
import random
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from ledger.containment.duplicates import report_duplicate
from ledger.effects.recovery import apply_plan, database_now, plan_for
from ledger.effects.transitions import (
    Move,
    Superseded,
    event_values,
    record_event,
    seconds_from_now,
    transition,
    transition_many,
)
from ledger.models import Effect, EventKind, Reason, Tool
from ledger.models.states import CHECKED, Kind, Status, sql_list
from ledger.observability.metrics import count_reconciliation
from ledger.policy.tools import Policy
from ledger.rules import reach
from ledger.rules.lookup_absence import not_found_proves, tail_check_due
from ledger.rules.reviewqueue import open_review
from reconcilers import execution
from reconcilers.providers import adapter_for, executes
from reconcilers.providers.outcomes import DUPLICATE, FOUND, NOT_FOUND, Lookup

log = logging.getLogger(__name__)

ACTOR = "system:reconciler"
_TABLE = Effect._meta.db_table
# Due for a check: the effect says so, and a dispatching one's lease has run out.
_DUE = (
    f"status IN ({sql_list(CHECKED)}) AND next_check_at <= now() "
    f"AND (status <> '{Status.DISPATCHING.value}' OR lease_expires_at <= now())"
)


def take(effect_ids: list[Any]) -> list[Effect]:
    """Take the named effects that are due and that nobody else has, in one statement."""
    return list(
        Effect.objects.raw(
            f"UPDATE {_TABLE} SET next_check_at = now() + make_interval(secs => %s) "
            f"WHERE id = ANY(%s::uuid[]) AND {_DUE} RETURNING *",
            [settings.LEDGER_CHECK_LEASE, [str(i) for i in effect_ids]],
        )
    )


def take_next() -> Effect | None:
    """Take the most overdue effect; SKIP LOCKED lets concurrent checkers pass each other."""
    rows = list(
        Effect.objects.raw(
            f"UPDATE {_TABLE} SET next_check_at = now() + make_interval(secs => %s) "
            f"WHERE id = (SELECT id FROM {_TABLE} WHERE {_DUE} "
            f"ORDER BY next_check_at LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *",
            [settings.LEDGER_CHECK_LEASE],
        )
    )
    return rows[0] if rows else None


def process_one(effect_id: Any) -> bool:
    """Check one effect if it is due. Returns whether this call did the check."""
    return process_many([effect_id]) == 1


def process_many(effect_ids: list[Any]) -> int:
    """Check the named effects that are due. Returns how many this call checked."""
    effects = take(effect_ids)
    check(effects)
    return len(effects)


def process_next() -> bool:
    effect = take_next()
    if effect is None:
        return False
    check([effect])
    return True


# Provider lookups of one batch run side by side: they wait on the network, not on us.
lookup_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lookup")


def check(effects: list[Effect]) -> None:
    """Decide each taken effect: tools and the clock are read once per batch, the providers
    are asked concurrently and outside any transaction, and the answers are recorded with
    their consequences in one transaction (an effect that moved meanwhile is left alone)."""
    if not effects:
        return
    tools = {t.name: t for t in Tool.objects.filter(name__in={e.tool for e in effects})}
    policies = {
        name: Policy.from_tool(tools[name]) if name in tools else Policy.unsafe(name)
        for name in {e.tool for e in effects}
    }
    now = database_now()
    asking = [e for e in effects if policies[e.tool].has_lookup]
    lost = reach.lost_dispatch([e.id for e in asking])
    answers = dict(
        zip(
            [e.id for e in asking],
            lookup_pool.map(lambda e: adapter_for(tools.get(e.tool)).lookup(e), asking),
            strict=True,
        )
    )
    moves: list[Move] = []
    others: list[Effect] = []
    for effect in effects:
        answer = answers.get(effect.id)
        move = (
            None
            if answer is None
            else _settling_move(effect, policies[effect.tool], answer, now, lost.get(effect.id))
        )
        if move is None:
            others.append(effect)
        else:
            moves.append(move)
    # One commit for the batch (a WAL flush per effect would dominate).
    with transaction.atomic():
        moved = transition_many(moves, actor=ACTOR)
        for move in moves:
            if move.effect.id in moved:
                count_reconciliation(move.effect.tool, answers[move.effect.id].outcome)
            else:
                log.info("effect %s changed while it was being checked; leaving it", move.effect.id)
        _send_compensations([m for m in moves if m.effect.id in moved], tools)
        # A savepoint each, so that one effect that moved meanwhile does not undo the others.
        for effect in others:
            policy = policies[effect.tool]
            if effect.id in answers:
                _record_answer(effect, policy, answers[effect.id], now, lost.get(effect.id))
            else:
                _without_lookup(effect, policy, now)


def _send_compensations(moves: list[Move], tools: dict[str, Tool]) -> None:
    """Compensations the ledger sends itself that a proof of absence moved back to `planned`
    (one that started in doubt after a restore, looked up before it was ever sent): woken now,
    after the commit; the sweep re-drives them too (`execution.redrive_executions`)."""
    for move in moves:
        tool = tools.get(move.effect.tool)
        if (
            move.to == Status.PLANNED
            and move.effect.kind == Kind.COMPENSATION
            and tool is not None
            and executes(tool.reconciler)
        ):
            execution.execute_after_commit(move.effect.id)


def _reconciliation(effect: Effect, answer: Lookup, policy: Policy) -> dict[str, Any]:
    """The reconciliation event of an answer: what the provider said, whatever follows, with
    the provider's own record of it (redacted like any payload) so that ours and theirs can be
    compared later, a mismatch above all."""
    data = answer.evidence()
    if isinstance(answer.answer, dict):
        data["record"] = policy.redactor(answer.answer)
    return {
        "kind": EventKind.RECONCILIATION,
        "actor": ACTOR,
        "from_status": effect.status,
        "to_status": effect.status,
        "reason": answer.outcome,
        "data": data,
    }


def _settling_move(
    effect: Effect,
    policy: Policy,
    answer: Lookup,
    now: datetime,
    lost: tuple[datetime, datetime] | None = None,
) -> Move | None:
    """The answer's whole consequence when it is one transition, with the reconciliation event
    ahead of it: found and matching (confirmed or failed as the provider says; pending moves a
    dispatching effect to awaiting_confirmation), or a not-found that proves absence
    (`ledger.rules.lookup_absence`: planned while attempts remain, else failed: it was never
    sent). None when it takes more (a review, a reschedule, a chain of moves): `_apply`."""

    def move(to: Status, reason: str, changes: dict[str, Any], data: dict[str, Any]) -> Move:
        before = [event_values(**_reconciliation(effect, answer, policy))]
        return Move(effect, to, reason=reason, changes=changes, data=data, before=before)

    if answer.outcome == FOUND and not answer.mismatches:
        evidence = {"provider_ref": answer.provider_ref, "lookup": answer.evidence()}
        changes: dict[str, Any] = {"provider_ref": policy.redactor.text(answer.provider_ref)}
        if answer.status in ("confirmed", "failed"):
            if answer.answer is not None:
                changes["response"] = policy.redactor(answer.answer)
            return move(Status(answer.status), "found_at_provider", changes, evidence)
        if effect.status != Status.DISPATCHING:
            return None  # pending while awaiting or unknown: asked again later
        # Pending at the provider: it has the request and will decide.
        wait = policy.confirm_within or timedelta(hours=1)
        changes["confirm_deadline"] = seconds_from_now(wait.total_seconds())
        changes["next_check_at"] = seconds_from_now(_backoff(0))
        return move(Status.AWAITING_CONFIRMATION, "pending_at_provider", changes, evidence)
    if answer.outcome == NOT_FOUND and effect.status != Status.AWAITING_CONFIRMATION:
        proof = not_found_proves(effect, policy, taken_at=now, listed=answer.listed, lost=lost)
        if not proof.ground:
            return None
        data = {"lookup": answer.evidence(), "proof": proof.ground}
        # Sent again or not, a first request that lands late must still be caught.
        tail = seconds_from_now((tail_check_due(policy, now) - now).total_seconds())
        if effect.attempt < effect.max_attempts:
            changes = {"next_check_at": None, "checks": 0, "tail_check_at": tail}
            return move(Status.PLANNED, "never_received", changes, data)
        return move(Status.FAILED, "never_sent", {"tail_check_at": tail}, data)
    return None


def _record_answer(
    effect: Effect,
    policy: Policy,
    answer: Lookup,
    now: datetime,
    lost: tuple[datetime, datetime] | None = None,
) -> None:
    try:
        with transaction.atomic():
            record_event(effect.id, **_reconciliation(effect, answer, policy))
            count_reconciliation(effect.tool, answer.outcome)
            _apply(effect, policy, answer, now, lost)
    except Superseded:
        log.info("effect %s changed while it was being checked; leaving it", effect.id)


def _without_lookup(effect: Effect, policy: Policy, now: datetime) -> None:
    """Nobody can be asked: awaiting effects time out, the rest follow the capability table."""
    try:
        with transaction.atomic():
            count_reconciliation(effect.tool, "no_lookup")
            if effect.status == Status.AWAITING_CONFIRMATION:
                if effect.confirm_deadline and effect.confirm_deadline > now:
                    _reschedule(effect, effect.confirm_deadline)
                    return
                effect = transition(effect, Status.UNKNOWN, actor=ACTOR, reason="confirm_timeout")
            effect = apply_plan(effect, plan_for(effect, policy, blocked=False, now=now), ACTOR)
            _reschedule(effect, None)
    except Superseded:
        log.info("effect %s changed while it was being checked; leaving it", effect.id)


def _apply(
    effect: Effect,
    policy: Policy,
    answer: Lookup,
    now: datetime,
    lost: tuple[datetime, datetime] | None = None,
) -> None:
    """The answers that take more than one transition (`_settling_move` has the others)."""
    if answer.outcome == DUPLICATE:
        # Received at least once, perhaps more: nothing automatic may act on it any more.
        effect = _to_unknown(effect, Reason.DUPLICATE.value)
        report_duplicate(
            effect.id,
            effect.tool,
            status=effect.status,
            actor=ACTOR,
            evidence={"refs": [policy.redactor.text(r) for r in answer.refs]},
        )
        _reschedule(effect, None)
    elif answer.outcome == FOUND and answer.mismatches:
        effect = _to_unknown(effect, Reason.MISMATCH.value)
        open_review(effect.id, Reason.MISMATCH)
        _reschedule(effect, None)
    elif answer.outcome == NOT_FOUND and effect.status != Status.AWAITING_CONFIRMATION:
        _not_found(effect, policy, now, answer.listed, lost)
    else:
        # Also a pending record for an effect that has left dispatching: asked again later.
        _inconclusive(effect, answer, now)


def _not_found(
    effect: Effect,
    policy: Policy,
    now: datetime,
    listed: bool,
    lost: tuple[datetime, datetime] | None = None,
) -> None:
    """A not-found that proves nothing yet (a proof is a `_settling_move`)."""
    proof = not_found_proves(effect, policy, taken_at=now, listed=listed, lost=lost)
    if proof.not_before is None:
        # A provider that ignores keys may hold our request under another name, or its search
        # has forgotten it: only a person, or a statement, can tell.
        effect = _to_unknown(effect, Reason.NOT_FOUND_UNPROVEN.value)
        open_review(effect.id, Reason.NOT_FOUND_UNPROVEN)
        _reschedule(effect, None)
        return
    # A slow request may still land: ask again once it could no longer.
    _reschedule(effect, proof.not_before)


def _inconclusive(effect: Effect, answer: Lookup, now: datetime) -> None:
    if effect.status == Status.AWAITING_CONFIRMATION:
        if effect.confirm_deadline and effect.confirm_deadline > now:
            _reschedule(effect, now + timedelta(seconds=_backoff(0)))
            return
        effect = transition(effect, Status.UNKNOWN, actor=ACTOR, reason="confirm_timeout")
    elif effect.status == Status.DISPATCHING:
        # A lost response is unknown, never failed.
        effect = transition(effect, Status.UNKNOWN, actor=ACTOR, reason="lease_expired")
    checks = effect.checks + 1
    if checks >= settings.LEDGER_MAX_CHECKS:
        open_review(effect.id, Reason.INCONCLUSIVE)
        _reschedule(effect, None, checks=checks)
    else:
        # A provider that said when to ask again (a 429's Retry-After) is not asked sooner.
        wait = max(_backoff(checks), min(answer.retry_after or 0.0, settings.LEDGER_BACKOFF_CAP))
        _reschedule(effect, now + timedelta(seconds=wait), checks=checks)


def _to_unknown(effect: Effect, reason: str) -> Effect:
    if effect.status in (Status.DISPATCHING, Status.AWAITING_CONFIRMATION):
        return transition(effect, Status.UNKNOWN, actor=ACTOR, reason=reason)
    return effect


def _backoff(checks: int) -> float:
    """Exponential backoff with jitter, so that a provider outage is not met by a stampede."""
    ceiling = min(settings.LEDGER_BACKOFF_CAP, settings.LEDGER_BACKOFF_BASE * 2**checks)
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def _reschedule(effect: Effect, when: datetime | None, *, checks: int | None = None) -> None:
    """Set the next check (None: no more automatic checks) unless the effect moved on."""
    fields = ["next_check_at = %s"]
    params: list[Any] = [when]
    if checks is not None:
        fields.append("checks = %s")
        params.append(checks)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_TABLE} SET {', '.join(fields)} WHERE id = %s AND version = %s",
            [*params, effect.id, effect.version],
        )
