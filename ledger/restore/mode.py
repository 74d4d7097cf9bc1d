"""Entering, watching and ending restore mode.

Entering (`begin`), in one transaction under the halts' advisory lock:

- **Sequences move forward** past the witness's high-water marks (or, with no witness, by a
  wide margin), so no event id, halt id or configuration version is issued a second time.
- **Effects that may have moved are put in doubt.** Every effect still planned, awaiting
  approval, dispatching or awaiting confirmation, and active since `lost_since` less the
  longest lease an agent can hold, moves to `unknown` with reason `restored_gap`: its claim, its
  outcome or its approval may be among what was lost. Each gets a review item and a
  reconciliation check due now, so tools with a lookup settle it from the provider's record
  before anyone acts, and the others wait for an operator.
- **Controls come back from the witness:** halts it saw that the database no longer has are set
  again, and key prefixes it saw revoked are revoked again. What it saw spent against amount
  limits and the database no longer holds is counted as used (`ledger.rules.spend`).
- **The fork is recorded** as a decision (`restore:<id>:decision:begin`), with the chain head
  the database held (`fork_seq`) and the witness's head of the lost branch.

While a window is open, pages show a banner, `/health` and `/metrics` report it. It ends
(`end`) when an admin says so with a reason, recorded as a decision, or by itself once every
effect it put in doubt has been settled (`end_if_checked`, run by the sweep).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ledger.audit import witness as witnesses
from ledger.audit.seal import chain_head
from ledger.containment import halts, keys
from ledger.effects.decision_records import record_standalone_decision
from ledger.effects.transitions import Move, SqlExpr, transition_many
from ledger.errors import InvalidTransition, ValidationFailed
from ledger.models import (
    AlertKind,
    ApiKey,
    Effect,
    Reason,
    RestoreSource,
    RestoreWindow,
    ReviewItem,
)
from ledger.models.states import Status
from ledger.policy import configversion
from ledger.restore import gap
from ledger.rules import outbox, spend
from ledger.rules.halts import HALT_LOCK
from ledger.rules.restore_state import longest_lease
from ledger.rules.reviewqueue import open_review

log = logging.getLogger(__name__)

REASON = gap.REASON
ACTOR = "system:restore"
DECISIONS_RUN = "restores"
# With no witness, how far each sequence jumps: further than any lost window can have used.
SEQUENCE_MARGIN = 1_000_000
# Effects moved per transition_many call while entering.
BATCH = 500
# What may have moved in the lost window without the database knowing.
IN_DOUBT_FROM = (
    Status.PLANNED,
    Status.AWAITING_APPROVAL,
    Status.DISPATCHING,
    Status.AWAITING_CONFIRMATION,
)


def current() -> RestoreWindow | None:
    """The open window, or None."""
    return RestoreWindow.objects.filter(ended_at__isnull=True).first()


def _reason(reason: str) -> str:
    reason = reason.strip()
    if not reason or len(reason) > 2000:
        raise ValidationFailed("Give a reason.", {"reason": "1 to 2000 characters"})
    return reason


def _sequences_forward(witness: dict[str, Any] | None) -> dict[str, int]:
    """Move every sequence of the schema past what the witness saw (or by the margin)."""
    moved: dict[str, int] = {}
    seen = (witness or {}).get("sequences", {})
    with connection.cursor() as cursor:
        for name, now in witnesses.sequences().items():
            target = int(seen[name]) + 1 if name in seen else now + SEQUENCE_MARGIN
            if target > now:
                cursor.execute("SELECT setval(%s::regclass, %s)", [name, target])
                moved[name] = target
    return moved


def _put_in_doubt(lost_since: datetime) -> int:
    """Move the effects that may have moved in the window to unknown, in batches."""
    since = lost_since - longest_lease()
    doubted = 0
    while True:
        batch = list(
            Effect.objects.filter(status__in=IN_DOUBT_FROM, updated_at__gte=since).order_by("pk")[
                :BATCH
            ]
        )
        if not batch:
            return doubted
        moves = [
            Move(
                effect,
                Status.UNKNOWN,
                reason=REASON,
                changes={"next_check_at": SqlExpr("now()")},
                data={"lost_since": lost_since.isoformat()},
            )
            for effect in batch
        ]
        moved = transition_many(moves, actor=ACTOR)
        for effect_id in moved:
            open_review(effect_id, Reason.RESTORED_GAP)
        doubted += len(moved)
        if not moved:
            return doubted  # every one was moved by someone else meanwhile: none left here


def _controls_again(witness: dict[str, Any] | None) -> dict[str, list[Any]]:
    """Set again the halts and revocations the witness saw and the database lost."""
    applied: dict[str, list[Any]] = {"halts": [], "revoked_keys": []}
    if not witness:
        return applied
    for seen in witness.get("halts", []):
        switched = halts.halt(
            seen["scope"],
            seen["value"],
            reason=f"Set again after a restore (first set by {seen['halted_by']}): "
            f"{seen['reason']}"[:2000],
            by=ACTOR,
            include_compensations=bool(seen.get("include_compensations")),
            teams=seen.get("teams"),
        )
        if switched.changed:
            applied["halts"].append(switched.halt.pk)
    for prefix in witness.get("revoked_keys", []):
        if ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).exists():
            keys.revoke(prefix)
            applied["revoked_keys"].append(prefix)
    return applied


def _record(
    window: RestoreWindow, action: str, reason: str, by: str, details: dict
) -> Effect | None:
    return record_standalone_decision(
        halts.system_agent(),
        target=f"restore:{window.pk}",
        run_id=DECISIONS_RUN,
        key=f"restore:{window.pk}:decision:{action}",
        action=f"restore_{action}",
        reason=reason,
        asked={"window": window.pk, **details},
        actor=by,
        details={"window": window.pk, **details},
    )


@dataclass(frozen=True)
class Entered:
    window: RestoreWindow
    new: bool


def begin(
    *,
    lost_since: datetime,
    reason: str,
    by: str,
    source: str = RestoreSource.MANUAL,
    witness: dict[str, Any] | None = None,
    findings: list[dict[str, str]] | None = None,
) -> Entered:
    """Enter restore mode, or return the window already open (`new` False)."""
    reason = _reason(reason)
    if lost_since > timezone.now():
        raise ValidationFailed("lost_since is in the future.", {"lost_since": "not after now"})
    with transaction.atomic():
        with connection.cursor() as cursor:
            # The halts' lock: no claim passes its halt check while controls come back.
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [HALT_LOCK])
        open_now = current()
        if open_now is not None:
            return Entered(open_now, False)
        sequences = _sequences_forward(witness)
        head = (witness or {}).get("chain_head", {})
        try:
            with transaction.atomic():
                window = RestoreWindow.objects.create(
                    lost_since=lost_since,
                    source=RestoreSource(source),
                    started_by=by[:200],
                    reason=reason,
                    findings=findings or [],
                    fork_seq=chain_head().seq,
                    lost_head=dict(head),
                )
        except IntegrityError:  # another process opened one first
            return Entered(RestoreWindow.objects.get(ended_at__isnull=True), False)
        applied = _controls_again(witness)
        applied["in_doubt"] = _put_in_doubt(lost_since)
        applied["sequences"] = sequences
        window.applied = applied
        window.save(update_fields=["applied"])
        details = {
            "lost_since": lost_since.isoformat(),
            "source": window.source,
            "fork_seq": window.fork_seq,
            "lost_head": window.lost_head,
            "in_doubt": applied["in_doubt"],
        }
        decision = _record(window, "begin", reason[:2000], by, details)
        applied["spend"] = spend.count_again(witness, decision)
        window.save(update_fields=["applied"])
        outbox.notify(AlertKind.RESTORE, str(window.pk), {"window": window.pk, **details})
    configversion.expire()  # this process sees its own change at once; others by the version
    log.warning("restore mode on: %s", details)
    return Entered(window, True)


def unchecked() -> int:
    """Effects restore mode put in doubt that nobody has settled yet: their restored_gap review
    items still open (review_open_idx). One window is open at a time, and an item left open by
    an earlier one is as much in doubt."""
    return ReviewItem.objects.filter(reason=Reason.RESTORED_GAP, resolved_at__isnull=True).count()


def end(*, reason: str, by: str) -> RestoreWindow:
    """End the open window (an admin's call, recorded as a decision)."""
    reason = _reason(reason)
    with transaction.atomic():
        window = RestoreWindow.objects.select_for_update().filter(ended_at__isnull=True).first()
        if window is None:
            raise InvalidTransition("Restore mode is not on.", status="off")
        left = unchecked()
        window.ended_at, window.ended_by, window.end_reason = timezone.now(), by[:200], reason
        window.save(update_fields=["ended_at", "ended_by", "end_reason"])
        _record(window, "end", reason, by, {"unchecked": left})
    configversion.expire()
    log.warning("restore mode off (window %s, %s left unchecked): %s", window.pk, left, reason)
    return window


def left_to_check(window: RestoreWindow) -> dict[str, Any]:
    """What keeps the window open: effects in doubt, tools not swept, statements missing."""
    return {
        "unchecked": unchecked(),
        "unswept": gap.unswept(window),
        "statements_missing": gap.statements_missing(window),
    }


def end_if_checked() -> RestoreWindow | None:
    """End the open window once every effect it put in doubt is settled, every tool that can
    list the window has been swept, and every tool settled by statements has a final statement
    covering it. Returns the window if ended."""
    window = current()
    if window is None or any(left_to_check(window).values()):
        return None
    return end(
        reason="Every effect put in doubt is settled, and the lost window is accounted for.",
        by=ACTOR,
    )


def check_witness() -> Entered | None:
    """Compare the database with the witness; enter restore mode on any finding. Then, when
    not in restore mode, write the witness afresh. Run at start and by the sweep."""
    if witnesses.path() is None:
        return None
    try:
        seen = witnesses.read()
    except witnesses.WitnessUnreadable as exc:
        log.error("witness: %s; restore mode is not decided by it until it is rewritten", exc)
        return None
    entered = None
    if seen is not None:
        findings = witnesses.compare(seen)
        if findings:
            entered = begin(
                lost_since=_newest_known(),
                reason=(
                    "The database is behind its witness: " + "; ".join(f.detail for f in findings)
                )[:2000],
                by=ACTOR,
                source=RestoreSource.WITNESS,
                witness=seen,
                findings=[f.as_dict() for f in findings],
            )
    if entered is not None and not entered.new:
        configversion.expire()  # another process opened it: this one sees it at once too
    if current() is None:
        witnesses.write()
    return entered


def watch() -> dict[str, Any]:
    """The scheduled run: the witness check, then the end of a window whose checks are done."""
    entered = check_witness()
    ended = end_if_checked()
    return {"entered": bool(entered and entered.new), "ended": ended is not None}


def _newest_known() -> datetime:
    """The last moment the restored database knows of: its newest event. Whatever happened
    after it may be lost."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(created_at) FROM ledger_effectevent")
        (newest,) = cursor.fetchone()
    return newest or timezone.now()


def status() -> dict[str, Any]:
    """What `manage.py restore status`, /health and the banner show."""
    window = current()
    if window is None:
        return {"on": False}
    return {
        "on": True,
        "window": window.pk,
        "lost_since": window.lost_since,
        "started_at": window.started_at,
        "source": window.source,
        "reason": window.reason,
        "in_doubt": window.applied.get("in_doubt", 0),
        **left_to_check(window),
        "swept": window.applied.get("swept", {}),
        "halts_set_again": len(window.applied.get("halts", [])),
        "keys_revoked_again": len(window.applied.get("revoked_keys", [])),
    }
