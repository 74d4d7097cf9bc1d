"""The decision the evidence suggests for a review item, pre-filled.

An operator should not have to type what the ledger already knows: where the evidence is
conclusive the suggestion fills every field its decision requires (the provider's reference,
evidence naming the event and what it found, a reason), so that the decision is one click and
one confirmation. Where it is not, the suggestion still names the likely decision and fills
what it can, and the operator adds what they checked.

| the evidence                                     | suggested                               |
| ------------------------------------------------ | --------------------------------------- |
| duplicate item, one provider reference in all    | not_duplicate                           |
| duplicate item, two or more references           | compensate (refund the other reference) |
| repeated request, the later effect confirmed     | compensate (refund it whole)            |
| mismatch item, the provider's record failed      | fail                                    |
| mismatch item, otherwise                         | accept_record                           |
| attempts exhausted, unknown, resend is safe      | extra_attempt                           |
| attempts exhausted, planned (refused each time)  | cancel                                  |
| a compensation to carry out by hand              | confirm (ref to fill in)                |
| the latest lookup found it, confirmed / failed   | confirm with its ref / fail             |
| the latest lookup proved absence, or a retry is  | retry                                   |
|   safe by `recovery.retry_ground`                |                                         |

A suggestion is made only for a decision the page offers (`reviews.decisions.offer.refusal`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.effects.recovery import database_now
from ledger.models import Effect, Reason, ReviewItem
from ledger.models.states import Kind, Status
from ledger.policy.tools import policy_for
from reviews.decisions.declaration import MISMATCH_REASONS, Action
from reviews.decisions.evidence import FAILED_STATUSES, NOT_FOUND, Evidence, evidence_for
from reviews.decisions.grounds import resend_ground
from reviews.decisions.kinds import KINDS
from reviews.decisions.offer import refusal


@dataclass(frozen=True)
class Suggestion:
    action: Action
    label: str  # what the button says, e.g. "Confirm (the lookup found ch_123)"
    initial: dict[str, Any] = field(default_factory=dict)  # the decision form's pre-filled fields


def suggestion(
    effect: Effect, item: ReviewItem | None, evidence: Evidence | None = None
) -> Suggestion | None:
    """The decision the evidence suggests for `effect` with `item` open (None: no suggestion)."""
    if item is None or effect.kind == Kind.DECISION:
        return None
    if evidence is None:
        evidence = evidence_for([effect.id])[effect.id]
    return _suggest(effect, item, evidence, database_now())


def suggest_for_rows(items: Sequence[ReviewItem]) -> dict[int, Suggestion]:
    """Suggestions for a page of queue rows, keyed by item id, in a constant number of queries:
    the effects (unless the rows carry them), their evidence, the clock."""
    if not items:
        return {}
    loaded = [i for i in items if "effect" in i._state.fields_cache]
    effects = {i.effect_id: i.effect for i in loaded}
    missing = [i.effect_id for i in items if i.effect_id not in effects]
    effects.update(Effect.objects.in_bulk(missing))
    evidence = evidence_for(effects)
    now = database_now()
    found: dict[int, Suggestion] = {}
    for item in items:
        effect = effects[item.effect_id]
        if effect.kind != Kind.DECISION and (
            made := _suggest(effect, item, evidence[effect.id], now)
        ):
            found[item.pk] = made
    return found


def _suggest(
    effect: Effect, item: ReviewItem, evidence: Evidence, now: datetime
) -> Suggestion | None:
    made = _from_evidence(effect, item, evidence, now)
    if made is None:
        return None
    grounded = KINDS[made.action].grounded
    ground = _ground(effect, evidence, now) if grounded else ""
    if refusal(effect, item, made.action, evidence, ground) is not None:
        return None
    return made


def _ground(effect: Effect, evidence: Evidence, now: datetime) -> str:
    return resend_ground(effect, evidence, policy=policy_for(effect.tool), now=now)


def _from_evidence(
    effect: Effect, item: ReviewItem, evidence: Evidence, now: datetime
) -> Suggestion | None:
    """The suggestion for the item's reason (the table above), before the page's rules."""
    reason = item.reason
    if reason == Reason.DUPLICATE:
        return _duplicate(effect, evidence)
    if reason == Reason.REPEATED_REQUEST:
        return _repeated(effect)
    if reason in MISMATCH_REASONS:
        return _mismatch(evidence)
    if reason == Reason.ATTEMPTS_EXHAUSTED:
        return _exhausted(effect, evidence, now)
    if reason == Reason.MANUAL_EXECUTION and effect.status == Status.PLANNED:
        return Suggestion(
            Action.CONFIRM,
            "Confirm (done by hand)",
            {"reason": "Carried out by hand by an operator."},
        )
    if effect.status not in (Status.UNKNOWN, Status.AWAITING_CONFIRMATION):
        return None
    if evidence.found_ref and evidence.lookup is not None:
        return _found(evidence)
    return _retry(effect, evidence, now)


def _exhausted(effect: Effect, evidence: Evidence, now: datetime) -> Suggestion | None:
    """Attempts exhausted: one more where a resend is safe. A planned effect spent its attempts
    being refused before it was sent: one more is unlikely to fare better, so cancelling is
    suggested (one more attempt is offered)."""
    if effect.status == Status.PLANNED:
        return Suggestion(
            Action.CANCEL,
            "Cancel (no attempts left)",
            {"reason": "All attempts were refused before sending: cancelled."},
        )
    if _ground(effect, evidence, now):
        return Suggestion(
            Action.EXTRA_ATTEMPT,
            f"One more attempt ({effect.attempt} of {effect.max_attempts} used)",
            {"reason": "Sending it again under the same key cannot do it twice."},
        )
    return None


def _found(evidence: Evidence) -> Suggestion | None:
    """The latest lookup found it: confirmed with its reference, or failed, as it found it."""
    lookup = evidence.lookup
    status = str(lookup.data.get("status") or "")
    cited = f"Lookup event {lookup.id}: the provider holds {evidence.found_ref} ({status})."
    if status == Status.CONFIRMED:
        return Suggestion(
            Action.CONFIRM,
            f"Confirm (the lookup found {evidence.found_ref})",
            {
                "provider_ref": evidence.found_ref,
                "evidence": cited,
                "reason": "The provider's lookup found it done.",
            },
        )
    if status in FAILED_STATUSES:
        return Suggestion(
            Action.FAIL,
            f"Mark failed (the lookup found {evidence.found_ref} {status})",
            {"evidence": cited, "reason": "The provider's lookup found it failed."},
        )
    return None


def _retry(effect: Effect, evidence: Evidence, now: datetime) -> Suggestion | None:
    """Nothing found: a retry, where the lookup proved it absent or a resend is safe."""
    if effect.status != Status.UNKNOWN or effect.attempt >= effect.max_attempts:
        return None
    if evidence.lookup_outcome != NOT_FOUND and not _ground(effect, evidence, now):
        return None
    lookup = evidence.lookup
    absent = (
        f" (lookup event {lookup.id} found nothing)"
        if lookup is not None and evidence.lookup_outcome == NOT_FOUND
        else ""
    )
    return Suggestion(
        Action.RETRY,
        KINDS[Action.RETRY].label,
        {"reason": f"A retry under the same key cannot do it twice{absent}."},
    )


def _repeated(effect: Effect) -> Suggestion | None:
    """The same request sent twice in one run: this, the later effect, is refunded whole (its
    own charge), once confirmed; the earlier one stands. A call made twice on purpose is closed
    as not a duplicate instead, which the page offers beside it."""
    if effect.status != Status.CONFIRMED:
        return None
    return Suggestion(
        Action.COMPENSATE,
        "Compensate (refund this repeated charge)",
        {"reason": "The same request was sent twice in this run: the repeat is refunded."},
    )


def _duplicate(effect: Effect, evidence: Evidence) -> Suggestion:
    """One reference in all the evidence: the "duplicate" was the same charge reported twice.
    Two or more: the provider holds another one, which is refunded by its reference."""
    data = evidence.lookup.data if evidence.lookup is not None else {}
    refs = [effect.provider_ref, *(data.get("refs") or []), evidence.found_ref, evidence.record_ref]
    distinct = list(dict.fromkeys(r for r in refs if isinstance(r, str) and r))
    cited = f"event {evidence.lookup.id}" if evidence.lookup is not None else "the evidence"
    if len(distinct) <= 1:
        ref = distinct[0] if distinct else "—"
        return Suggestion(
            Action.NOT_DUPLICATE,
            f"Not a duplicate: same charge ({ref})",
            {
                "evidence": f"Checked the provider: one charge, {ref} ({cited} names no other).",
                "reason": "The provider holds one charge: not a duplicate.",
            },
        )
    other = next(r for r in distinct if r != effect.provider_ref)
    request: dict[str, Any] = {"charge": other}
    if isinstance(effect.request, dict) and "amount" in effect.request:
        request["amount"] = effect.request["amount"]
    return Suggestion(
        Action.COMPENSATE,
        f"Compensate (refund the second charge {other})",
        {
            "compensation_request": json.dumps(request, indent=2),
            "compensation_tool": policy_for(effect.tool).compensated_by,
            "reason": f"The provider charged twice ({', '.join(distinct)}); refund {other}.",
        },
    )


def _mismatch(evidence: Evidence) -> Suggestion:
    """The provider's record differs from ours: a record that failed means nothing was done;
    any other is the provider's account of what was, accepted as it stands."""
    record = evidence.record
    if record is None:
        return Suggestion(
            Action.ACCEPT_RECORD,
            KINDS[Action.ACCEPT_RECORD].label,
            {"reason": "The provider's record stands."},
        )
    differing = ", ".join(str(m) for m in evidence.record_data.get("mismatches") or [])
    differs = f"differing from ours: {differing or 'some fields'}"
    ref = evidence.record_ref or "its record"
    if evidence.record_status in FAILED_STATUSES:
        return Suggestion(
            Action.FAIL,
            f"Mark failed (the provider's {ref} {evidence.record_status})",
            {
                "evidence": f"Event {record.id}: the provider's {ref} is "
                f"{evidence.record_status}, {differs}.",
                "reason": "The provider did not carry it out.",
            },
        )
    return Suggestion(
        Action.ACCEPT_RECORD,
        f"Provider's record accepted ({ref})",
        {
            "evidence": f"Event {record.id}: the provider's record {ref} "
            f"({evidence.record_status or 'no status'}), {differs}.",
            "reason": "The provider's record is what happened.",
        },
    )
