"""What a statement's lines mean for one effect: a pure function of the effect as read and all
its current lines (from every imported statement, whatever the period): `verdict_on`. A
statement's verdict is not a decision: decisions are people's (and the ledger's own rulings),
recorded as effects; a verdict is what the provider's lines say, and moves an effect only by
`confirm` or `fail`.

Money lines are charges and captures for an action, refunds for a compensation; a successful
charge is one record, successful captures make one record per provider_ref (their amounts
summed: partial captures of one authorization). In this order:

1. two or more successful records → `duplicate`;
2. planned (or awaiting approval) with a successful or pending money line → `duplicate` (it
   may be dispatched again);
3. dispatched again (attempt ≥ 2) with such a line from before its last claim (minus the
   skew) under another provider ref than its own → `duplicate` (the earlier dispatch landed);
4. confirmed, and a reversal, or a record under another provider ref, or a failed line for
   its own ref (or for its only attempt) → `contradicts`; confirmed or compensated and a
   record of another amount or currency → `amount_mismatch`; else `agrees`;
5. failed or cancelled with a successful or pending money line → `contradicts`;
6. in flight (dispatching, awaiting confirmation, unknown): a record of another amount or
   currency → `amount_mismatch`; under another provider ref than the one it has →
   `contradicts`;
7. not movable (awaiting confirmation, a live lease) or with evidence of receipt (a provider
   ref, a webhook, a found or pending lookup) → `held`: nothing moves;
8. unknown or lease-expired dispatching: one matching record → `confirm`; only pending lines
   → `held`; only failed money lines → `fail`; else `agrees`.

A record's amount is compared where the effect has one (`Effect.amount_minor`, filled in from
the request by a trigger); its currency where the effect has one. What could not be compared
is named in the verdict (`unchecked`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ledger.models import LineStatus, LineType
from ledger.models.states import Kind, Status

CONFIRM, FAIL, DUPLICATE = "confirm", "fail", "duplicate"
AMOUNT_MISMATCH, CONTRADICTS, HELD, AGREES = "amount_mismatch", "contradicts", "held", "agrees"
_CHARGES = frozenset({LineType.CHARGE, LineType.CAPTURE})
_REFUNDS = frozenset({LineType.REFUND})


@dataclass(frozen=True)
class LineFact:
    id: int
    statement: int
    line_no: int
    provider_ref: str
    type: str
    status: str
    amount_minor: int
    currency: str
    occurred_at: datetime

    def shown(self) -> dict[str, Any]:
        """What an event keeps of the line: the provider's record, as imported."""
        return {
            "statement": self.statement,
            "line": self.line_no,
            "provider_ref": self.provider_ref,
            "type": self.type,
            "status": self.status,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "occurred_at": self.occurred_at.isoformat(),
        }


@dataclass(frozen=True)
class EffectFact:
    id: Any
    status: str
    version: int
    kind: str
    tool: str
    attempt: int
    max_attempts: int
    provider_ref: str
    amount_minor: int | None
    currency: str
    lease_expired: bool
    # A webhook, a found or pending lookup (the events); a provider ref counts too.
    receipt: bool
    # When it was last claimed (only read for an effect dispatched more than once).
    last_claim: datetime | None


@dataclass(frozen=True)
class Record:
    """One thing the provider did for the effect: a charge, or the captures under one ref."""

    provider_ref: str
    amount_minor: int
    currency: str  # "" when its captures disagree on the currency
    lines: tuple[LineFact, ...]


@dataclass(frozen=True)
class Verdict:
    action: str
    why: str
    # The lines the verdict rests on (a confirming record's lines, the duplicates, …).
    lines: tuple[LineFact, ...] = ()
    record: Record | None = None
    mismatches: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()


def records(lines: Sequence[LineFact], types: frozenset[str]) -> list[Record]:
    found: list[Record] = []
    captures: dict[str, list[LineFact]] = {}
    for line in lines:
        if line.type not in types or line.status != LineStatus.SUCCEEDED:
            continue
        if line.type == LineType.CAPTURE:
            captures.setdefault(line.provider_ref, []).append(line)
        else:
            found.append(Record(line.provider_ref, line.amount_minor, line.currency, (line,)))
    for ref, group in captures.items():
        currencies = {line.currency for line in group}
        found.append(
            Record(
                ref,
                sum(line.amount_minor for line in group),
                currencies.pop() if len(currencies) == 1 else "",
                tuple(group),
            )
        )
    return found


def compare(effect: EffectFact, record: Record) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what differs, what could not be compared) between the effect's amount and a record."""
    mismatches, unchecked = [], []
    if not effect.currency:
        unchecked.append("currency")
    elif record.currency != effect.currency:
        mismatches.append("currency")
    if effect.amount_minor is None:
        unchecked.append("amount")
    elif record.amount_minor != effect.amount_minor:
        mismatches.append("amount")
    return tuple(mismatches), tuple(unchecked)


def verdict_on(effect: EffectFact, lines: Sequence[LineFact], skew: timedelta) -> Verdict:
    types = _REFUNDS if effect.kind == Kind.COMPENSATION else _CHARGES
    found = records(lines, types)
    money = [line for line in lines if line.type in types]
    pending = [line for line in money if line.status == LineStatus.PENDING]
    failed = [line for line in money if line.status == LineStatus.FAILED]
    reversals = [
        line
        for line in lines
        if line.type == LineType.REVERSAL and line.status == LineStatus.SUCCEEDED
    ]
    status = effect.status
    received = tuple(line for record in found for line in record.lines) + tuple(pending)
    if len(found) >= 2:
        return Verdict(DUPLICATE, "two or more successful lines", received)
    if status in (Status.PLANNED, Status.AWAITING_APPROVAL) and received:
        return Verdict(DUPLICATE, "a line for an effect that may be dispatched again", received)
    earlier = _from_earlier_dispatch(effect, received, skew)
    if earlier:
        return Verdict(DUPLICATE, "a line from an earlier dispatch of a retried effect", earlier)
    record = found[0] if found else None
    if status in (Status.CONFIRMED, Status.COMPENSATED):
        return _settled(effect, record, failed, reversals)
    if status in (Status.FAILED, Status.CANCELLED):
        if received:
            return Verdict(CONTRADICTS, f"the provider did it; the effect is {status}", received)
        return Verdict(AGREES, "")
    # In flight: dispatching, awaiting confirmation or unknown.
    if record is not None:
        mismatches, unchecked = compare(effect, record)
        if mismatches:
            return Verdict(
                AMOUNT_MISMATCH, "amount or currency differ", record.lines, record, mismatches
            )
        if effect.provider_ref and record.provider_ref != effect.provider_ref:
            return Verdict(CONTRADICTS, "another provider ref than the effect's", record.lines)
    movable = status == Status.UNKNOWN or (status == Status.DISPATCHING and effect.lease_expired)
    if not movable or effect.receipt or effect.provider_ref:
        why = "evidence of receipt" if movable else f"{status}, not movable by a statement"
        return Verdict(HELD, why, received or tuple(failed))
    if record is not None:
        return Verdict(CONFIRM, "one matching successful line", record.lines, record, (), unchecked)
    if pending:
        return Verdict(HELD, "pending at the provider", tuple(pending))
    if failed:
        return Verdict(FAIL, "the provider declined it", (failed[-1],))
    return Verdict(AGREES, "")


def _from_earlier_dispatch(
    effect: EffectFact, received: Sequence[LineFact], skew: timedelta
) -> tuple[LineFact, ...]:
    """Lines of an effect dispatched again that predate its last claim and are not its own
    confirmed record: the earlier request landed after all."""
    if effect.attempt < 2 or effect.last_claim is None:
        return ()
    cutoff = effect.last_claim - skew
    return tuple(
        line
        for line in received
        if line.occurred_at < cutoff
        and not (effect.provider_ref and line.provider_ref == effect.provider_ref)
    )


def _settled(
    effect: EffectFact,
    record: Record | None,
    failed: Sequence[LineFact],
    reversals: Sequence[LineFact],
) -> Verdict:
    if effect.status == Status.CONFIRMED and reversals:
        return Verdict(CONTRADICTS, "a reversal of a confirmed charge", tuple(reversals))
    if record is not None:
        if effect.provider_ref and record.provider_ref != effect.provider_ref:
            return Verdict(
                CONTRADICTS, "confirmed under another provider ref", record.lines, record
            )
        mismatches, unchecked = compare(effect, record)
        if mismatches:
            return Verdict(
                AMOUNT_MISMATCH, "amount or currency differ", record.lines, record, mismatches
            )
        return Verdict(AGREES, "", record.lines, record, (), unchecked)
    if effect.status == Status.CONFIRMED:
        own = [
            line
            for line in failed
            if line.provider_ref == effect.provider_ref or effect.attempt <= 1
        ]
        if own:
            return Verdict(CONTRADICTS, "a failed line for a confirmed effect", tuple(own))
    return Verdict(AGREES, "")
