"""What a lease holder reports after the provider call, and what happens to late reports."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from ledger.effects.transitions import (
    SqlExpr,
    Superseded,
    record_event,
    seconds_from_now,
    transition,
)
from ledger.effects.wakeups import wake
from ledger.errors import StaleLease
from ledger.models import Effect, EffectEvent, EventKind
from ledger.models.states import OUTCOME_TARGETS, Status
from ledger.policy import digests
from ledger.policy.tools import Policy

_FOLLOW_UP = frozenset({Status.CONFIRMED, Status.FAILED, Status.UNKNOWN})
_DEFAULT_CONFIRM_WITHIN = 3600
POLL_SECONDS = 30
# A late report names another provider reference than the one recorded: the provider may hold
# two charges. Sent inside the report's transaction, with the effect, the actor and the two
# references as `evidence`. What a duplicate means (a review item, the tool's halt) is an act of
# the floor above, `ledger.containment.duplicates`; `ledger.apps` connects it at start.
duplicate_found = Signal()


def _same(recorded: str | None, given: str) -> bool:
    """Constant-time comparison; any text a client sends is comparable (bytes, not str)."""
    return bool(recorded) and hmac.compare_digest(recorded.encode(), given.encode())


def _outcome(token: str, status: str, provider_ref: str, response: Any) -> dict[str, Any]:
    """What makes two reports the same report (its digest is stored as `outcome_digest`)."""
    return {"token": token, "status": status, "provider_ref": provider_ref, "response": response}


@dataclass(frozen=True)
class Report:
    """What an outcome report asks of an effect, worked out before anything is written."""

    repeated: bool  # the same report again: nothing to change
    target: Status
    changes: dict[str, Any]  # the columns it sets besides the status
    holds_lease: bool  # from the token holding the live lease (fenced again by the write)
    follows_up: bool  # from the worker that parked it in awaiting_confirmation


def read_report(
    effect: Any,
    *,
    token: str,
    status: str,
    provider_ref: str,
    response: Any,
    error: Any,
    policy: Policy,
) -> Report:
    """The report as changes to `effect` (an `Effect`, or a row with its columns)."""
    outcome = _outcome(token, status, provider_ref, response)
    target = OUTCOME_TARGETS[status]
    # Checked under the key version it was stored with: a repeat across a rotation is a repeat.
    if effect.outcome_digest and digests.same_value(effect.outcome_digest, outcome):
        return Report(True, target, {}, False, False)
    redact = policy.redactor
    holds_lease = effect.status == Status.DISPATCHING and _same(effect.lease_token, token)
    # The worker that parked an effect in awaiting_confirmation may report how it ended.
    follows_up = (
        effect.status == Status.AWAITING_CONFIRMATION
        and target in _FOLLOW_UP
        and _same(effect.outcome_token, token)
    )
    changes: dict[str, Any] = {
        "outcome_digest": digests.value_digest(outcome),
        "outcome_token": token,
    }
    if provider_ref:
        changes["provider_ref"] = redact.text(provider_ref)
    if response is not None:
        changes["response"] = redact(response)
    if error is not None:
        changes["error"] = redact(error)
    if target == Status.AWAITING_CONFIRMATION:
        wait = policy.confirm_within.total_seconds() if policy.confirm_within else None
        changes["confirm_deadline"] = seconds_from_now(int(wait or _DEFAULT_CONFIRM_WITHIN))
        # Poll soon where the provider can be asked; otherwise check at the deadline.
        changes["next_check_at"] = (
            seconds_from_now(POLL_SECONDS) if policy.has_lookup else changes["confirm_deadline"]
        )
    elif target == Status.UNKNOWN:
        # Decide at once what may follow: a lookup, a retry under the same key, or a person.
        changes["next_check_at"] = SqlExpr("now()")
    return Report(False, target, changes, holds_lease, follows_up)


# Fencing: the token must still hold an unexpired lease by the database clock.
FENCE = "lease_token = %s AND lease_expires_at > now()"


def record_outcome(
    effect: Effect,
    *,
    token: str,
    status: str,
    provider_ref: str,
    response: Any,
    error: Any,
    actor: str,
    policy: Policy,
) -> tuple[Effect, bool]:
    """Apply an outcome under the caller's lease. Returns (effect, repeated).

    A repeat (same token, status, provider_ref and response) changes nothing. So does a report
    from the latest lease that agrees with what a callback or a lookup settled meanwhile (the
    same final status and provider reference): it is kept as a `late_outcome` event and
    answered as a repeat. Anything else from a token that no longer holds the lease is refused
    with `stale_lease` and kept as a `late_outcome` event: evidence is never thrown away.
    """
    report = read_report(
        effect,
        token=token,
        status=status,
        provider_ref=provider_ref,
        response=response,
        error=error,
        policy=policy,
    )
    if report.repeated:
        return effect, True
    changes, target = report.changes, report.target
    where: list[tuple[str, list[Any]]] = [(FENCE, [token])] if report.holds_lease else []
    if report.holds_lease or report.follows_up:
        try:
            moved = transition(
                effect,
                target,
                actor=actor,
                reason=status,
                changes=changes,
                where=where,
                data=evidence(changes, status),
            )
            if target == Status.UNKNOWN:
                wake([moved.id])
            return moved, False
        except Superseded:
            effect = Effect.objects.get(pk=effect.pk)
    return _late(effect, token, report, status=status, provider_ref=provider_ref, actor=actor)


def _late(
    effect: Effect, token: str, report: Report, *, status: str, provider_ref: str, actor: str
) -> tuple[Effect, bool]:
    """A report from a token that no longer holds the lease: kept as a `late_outcome` event,
    answered as a repeat when it agrees with what settled the effect meanwhile, else refused."""
    if not _was_issued(effect, token):
        raise StaleLease("This lease token was never issued for this effect.", status=effect.status)
    changes, target = report.changes, report.target
    _keep_late_outcome(
        effect, status=status, provider_ref=provider_ref, changes=changes, actor=actor
    )
    if _agrees(effect, target, changes) and _last_lease(effect, token):
        # A callback (or a lookup) settled the effect while its lease holder was still
        # reporting, and the report says the same: the holder's work is done, not lost.
        return effect, True
    raise StaleLease(
        "This lease token no longer holds the effect; the report was kept as a late outcome.",
        status=effect.status,
    )


def evidence(changes: dict[str, Any], status: str) -> dict[str, Any]:
    shown = {k: v for k, v in changes.items() if k in ("provider_ref", "response", "error")}
    return {"outcome": status, **shown}


def _agrees(effect: Effect, target: Status, changes: dict[str, Any]) -> bool:
    """Does a report say what the effect already holds: the same final status and, where
    both name one, the same provider reference?"""
    if effect.status != target or target not in (Status.CONFIRMED, Status.FAILED):
        return False
    reported = changes.get("provider_ref", "")
    return not reported or not effect.provider_ref or reported == effect.provider_ref


def _last_lease(effect: Effect, token: str) -> bool:
    """Was `token` handed out by the effect's latest claim (not an earlier, superseded one)?"""
    last = (
        EffectEvent.objects.filter(
            effect=effect, kind=EventKind.TRANSITION, to_status=Status.DISPATCHING
        )
        .order_by("-id")
        .values_list("data__lease", flat=True)
        .first()
    )
    return last == digests.lease_digest(token)


def _was_issued(effect: Effect, token: str) -> bool:
    """Did a claim of this effect ever hand out `token`? A report under any other token is
    not evidence of anything, and is not kept."""
    return EffectEvent.objects.filter(
        effect=effect,
        kind=EventKind.TRANSITION,
        to_status=Status.DISPATCHING,
        data__lease=digests.lease_digest(token),
    ).exists()


def _keep_late_outcome(
    effect: Effect, *, status: str, provider_ref: str, changes: dict[str, Any], actor: str
) -> None:
    with transaction.atomic():
        record_event(
            effect.id,
            kind=EventKind.LATE_OUTCOME,
            actor=actor,
            from_status=effect.status,
            to_status=effect.status,
            reason="stale_lease",
            data=evidence(changes, status),
        )
        recorded = effect.provider_ref
        reported = changes.get("provider_ref", "")
        if reported and recorded and reported != recorded:
            # Two provider references for one effect: the provider may hold two charges.
            duplicate_found.send(
                Effect,
                effect=effect,
                actor=actor,
                evidence={"provider_ref": reported, "recorded_ref": recorded},
            )
