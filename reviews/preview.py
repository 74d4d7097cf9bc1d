"""What happens after a decision, before it is taken; and what recovery will do for a run.

Each decision form on the effect page says what the decision will lead to: the effect's next
state, who acts next (the ledger, the owning agent, a person or nobody) and by when, what its
dependents will do, and whether money moves. Nothing here decides anything: every sentence is
read off the rule that will apply, asked the way the code that applies it asks —
`ledger.effects.recovery.plan_for` on the would-be state for what the agent's `/recovery` will
answer,
`retry_ground` for why a resend cannot do the effect twice, `ledger.effects.interlocks` for which
upstreams hold a dependent back, `reconcilers.execution.can_execute` for whether the ledger
sends a refund itself.

The page renders one preview per offered decision, so the facts every preview needs (the
database clock, the open review item, the dependents and their upstreams) are read once per
effect version and kept on the effect instance.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ledger.containment.halts import halted_among
from ledger.containment.iso4217 import major_units
from ledger.effects.compensation import active_dependents
from ledger.effects.interlocks import Upstream, upstreams_of
from ledger.effects.recovery import (
    HONOURS_KEY,
    NOT_FOUND,
    READ_ONLY,
    RETRY_SAFE,
    VERIFIED_ABSENT,
    Plan,
    database_now,
    plan_for,
    retry_ground,
)
from ledger.effects.states import CANCELLABLE, UPSTREAM_DEAD, Kind, Status
from ledger.models import Effect, EffectDependency, Reason, RequestedBy, ReviewItem
from ledger.policy.tools import Policy, policy_for
from reconcilers.execution import can_execute
from reviews.approvals import waits_for_second_pair
from reviews.decision_kinds import (
    ACCEPT_RECORD,
    APPROVE,
    CANCEL,
    COMPENSATE,
    CONFIRM,
    EXTRA_ATTEMPT,
    FAIL,
    NOT_DUPLICATE,
    REJECT,
    RETRY,
    accepted_outcome,
)
from reviews.evidence import Evidence, evidence_of

# Who acts next, as the partial names them.
LEDGER, AGENT, PERSON, NOBODY = "ledger", "agent", "person", "nobody"


@dataclass(frozen=True)
class Line:
    """One plain sentence. `money`, when set, is the amount that moves (shown in bold after
    `text`); `when`, a time it is due by (shown after the sentence)."""

    text: str
    money: str = ""
    when: datetime | None = None


@dataclass(frozen=True)
class Preview:
    """What one decision on one effect will lead to."""

    action: str
    # The effect's status right after the decision.
    status: str
    # Who acts next: LEDGER, AGENT (`agent` by name), PERSON or NOBODY.
    actor: str
    agent: str
    lines: tuple[Line, ...]
    # What the owning agent's `POST /recovery` will answer for the effect afterwards, where the
    # decision hands it back to the agent (a retry); None where the effect leaves recovery.
    recovery: Plan | None = None
    money_moves: bool = False


@dataclass(frozen=True)
class _Facts:
    """What every preview of one effect version reads: once per page, not once per form."""

    now: datetime
    policy: Policy
    item: ReviewItem | None
    # What the provider has said of it: the latest lookup, the latest record it sent.
    evidence: Evidence
    # The effect's own upstreams, and each dependent's status and upstreams (this effect among
    # them), as `ledger.effects.interlocks` reads them.
    upstreams: tuple[Upstream, ...]
    # An active halt covers it (`ledger.containment.halts`): planned again, it could not be claimed
    # now.
    halted: bool
    dependents: tuple[tuple[str, str, tuple[Upstream, ...]], ...]


def money_of(effect: Effect) -> str:
    """The effect's amount as an operator reads it ("10.00 EUR"): the amount the ledger read
    at the tool's declared path, else the request's own `amount` and `currency`, else ""."""
    if effect.amount_minor is not None and effect.currency:
        return major_units(effect.amount_minor, effect.currency)
    request = effect.request if isinstance(effect.request, dict) else {}
    amount, currency = request.get("amount"), request.get("currency")
    if isinstance(amount, str | int) and not isinstance(amount, bool):
        return f"{amount} {currency}" if isinstance(currency, str) else str(amount)
    return ""


def _facts(effect: Effect) -> _Facts:
    cached = getattr(effect, "_preview_facts", None)
    if cached is not None and cached[0] == effect.version:
        return cached[1]
    downstream = list(
        EffectDependency.objects.filter(upstream_id=effect.pk)
        .order_by("id")
        .values_list("downstream_id", "downstream__status")
    )
    ups = upstreams_of([effect.pk, *(d for d, _ in downstream)])
    facts = _Facts(
        now=database_now(),
        policy=policy_for(effect.tool),
        item=ReviewItem.objects.filter(effect_id=effect.pk, resolved_at__isnull=True).first(),
        evidence=evidence_of(effect.pk),
        upstreams=tuple(ups[str(effect.pk)]),
        halted=str(effect.pk) in halted_among([effect.pk]),
        dependents=tuple((str(d), status, tuple(ups[str(d)])) for d, status in downstream),
    )
    effect._preview_facts = (effect.version, facts)
    return facts


def preview_for(effect: Effect, action: str) -> Preview:
    """What `action` on `effect` will lead to (rendered by `reviews/_preview.html`). Any action
    name gives a preview: one this module does not know gets a generic one."""
    facts = _facts(effect)
    build = _BUILDERS.get(action, _generic)
    preview = build(effect, facts, action)
    return replace(preview, lines=(*preview.lines, *_deadlines(effect, facts)))


def _base(effect: Effect, action: str, status: str, actor: str, *lines: Line) -> Preview:
    return Preview(action=action, status=status, actor=actor, agent=effect.agent.name, lines=lines)


def _unchanged(effect: Effect, action: str, text: str) -> Preview:
    """The effect stays as it is and a person acts next."""
    return _base(effect, action, effect.status, PERSON, Line(text))


def _generic(effect: Effect, facts: _Facts, action: str) -> Preview:
    return _unchanged(
        effect,
        action,
        "This page cannot say in advance what this decision does; check the effect after.",
    )


def _confirm(effect: Effect, facts: _Facts, action: str) -> Preview:
    lines = [Line("The effect becomes confirmed with the provider's reference you give.")]
    if effect.kind == Kind.COMPENSATION and effect.parent_id:
        lines.append(
            Line("The effect it compensates becomes compensated (if it is still confirmed).")
        )
    lines.append(Line("Nothing is sent: no money moves; this records what the provider did."))
    lines += _dependents(effect, facts, Status.CONFIRMED)
    return _base(effect, action, Status.CONFIRMED, NOBODY, *lines)


def _ends(status: Status, sentence: str) -> Any:
    """A decision that ends the effect in `status` and sends nothing."""

    def build(effect: Effect, facts: _Facts, action: str) -> Preview:
        return _base(
            effect,
            action,
            status,
            NOBODY,
            Line(sentence.format(agent=effect.agent.name)),
            Line("Nothing is sent: no money moves."),
            *_dependents(effect, facts, status),
        )

    return build


_fail = _ends(
    Status.FAILED,
    "The effect becomes failed: {agent} sees it failed and recovery never sends it again.",
)
_cancel = _ends(
    Status.CANCELLED,
    "The effect becomes cancelled before it is sent: {agent}'s claim of it will be refused.",
)


def _closes(effect: Effect, facts: _Facts, action: str) -> Preview:
    """`not_duplicate`, and `accept_record` on a settled effect: the item closes, the effect
    stays as it is."""
    return _base(
        effect,
        action,
        effect.status,
        NOBODY,
        Line(f"The review item closes; the effect stays {effect.status}."),
        Line("Nothing is sent: no money moves; its dependents are not affected."),
    )


def _accept_record(effect: Effect, facts: _Facts, action: str) -> Preview:
    """The provider's record stands: an effect with no outcome yet takes the record's."""
    outcome = accepted_outcome(effect, facts.evidence)
    if outcome is None:
        return _closes(effect, facts, action)
    return _base(
        effect,
        action,
        outcome,
        NOBODY,
        Line(
            f"The review item closes; the effect becomes {outcome}, as the provider's record says."
        ),
        Line("Nothing is sent: no money moves; this records what the provider did."),
        *_dependents(effect, facts, outcome),
    )


def _would_be_planned(effect: Effect, *, extra_attempt: bool = False) -> Effect:
    """The effect as a retry leaves it (reviews.decisions: back to planned, checks reset)."""
    after = copy.copy(effect)
    after.status = Status.PLANNED
    after.next_check_at, after.checks, after.confirm_deadline = None, 0, None
    if extra_attempt:
        after.max_attempts = effect.max_attempts + 1
    return after


def _resend(
    effect: Effect, facts: _Facts, action: str, ground: str, *, extra_attempt: bool = False
) -> Preview:
    """Back to planned: who sends it again, what their `/recovery` answers, and why the resend
    cannot do it twice."""
    after = _would_be_planned(effect, extra_attempt=extra_attempt)
    plan = plan_for(
        after,
        facts.policy,
        blocked=any(u.blocking for u in facts.upstreams),
        now=facts.now,
        halted=facts.halted,
    )
    agent, key = effect.agent.name, effect.idempotency_key
    lines = [
        Line(
            f"The effect returns to planned (attempt {after.attempt} of {after.max_attempts} used)."
        )
    ]
    ledger_sends = effect.kind == Kind.COMPENSATION and can_execute(effect.tool)
    by_hand = not ledger_sends and effect.requested_by == RequestedBy.OPERATOR
    if ledger_sends:
        actor = LEDGER
        lines.append(Line(f"The ledger sends it again itself through {effect.tool}."))
    elif by_hand:
        actor = PERSON
        lines.append(Line(_BY_HAND))
    else:
        actor = AGENT
        lines.append(
            Line(
                f"The ledger does not resend it: agent {agent} does, with the same idempotency "
                f"key {key}."
            )
        )
        lines.append(
            Line(
                f"Once it claims it, its lease runs {facts.policy.lease_for(None)} s unless it "
                "asks for another; still out after that, it goes through recovery again."
            )
        )
    if by_hand:
        pass  # its agent's /recovery answers wait (operator_decided): it is not the agent's
    elif plan.action == RETRY_SAFE:
        lines.append(Line(f"{agent}'s /recovery will answer {plan.action} ({plan.reason})."))
    else:
        lines.append(
            Line(f"{agent}'s /recovery will answer {plan.action} ({plan.reason}): it waits.")
        )
    money = money_of(effect)
    why = _WHY_SAFE.get(ground, "")
    if facts.policy.read_only:
        lines.append(Line(f"No money moves: {why}"))
    elif money:
        lines.append(Line("The resend may charge", money=money))
        lines.append(Line(f"It cannot charge twice: {why}"))
    else:
        lines.append(Line(f"It cannot be done twice: {why}"))
    lines += _dependents(effect, facts, Status.PLANNED)
    preview = _base(effect, action, Status.PLANNED, actor, *lines)
    return replace(
        preview,
        recovery=None if ledger_sends or by_hand else plan,
        money_moves=bool(money) and not facts.policy.read_only,
    )


# What an operator decided and the ledger cannot send: its agent may not claim it.
_BY_HAND = (
    "A person carries it out by hand and records it as done (Confirm); its agent may not "
    "claim it, since an operator decided it."
)

# A planned effect's ground for one more attempt (`reviews.decisions`).
NEVER_SENT = "planned"
_WHY_SAFE = {
    NEVER_SENT: "it was never sent.",
    READ_ONLY: "the tool only reads.",
    HONOURS_KEY: "the provider honours the idempotency key while it remembers it, so a charge "
    "it already made is answered, not repeated.",
    NOT_FOUND: "the provider's lookup found nothing under the key, and it honours the key.",
    VERIFIED_ABSENT: "two operators recorded that the provider never received it.",
}


def _ground(effect: Effect, facts: _Facts) -> str:
    """As `reviews.decisions` grounds a resend: a planned effect was never sent; otherwise the
    one rule, `retry_ground`, on the provider's latest lookup."""
    if effect.status == Status.PLANNED:
        return NEVER_SENT
    return retry_ground(
        effect, facts.policy, now=facts.now, last_lookup=facts.evidence.lookup_outcome
    )


def _retry(effect: Effect, facts: _Facts, action: str) -> Preview:
    if effect.attempt >= effect.max_attempts:
        return _refused(effect, action, f"All {effect.max_attempts} attempts have been used.")
    ground = _ground(effect, facts)
    if ground:
        return _resend(effect, facts, action, ground)
    return _base(
        effect,
        action,
        effect.status,
        PERSON,
        Line(
            "A resend could do it twice: the provider does not honour the key (or no longer "
            "remembers it) and has not said it never received it."
        ),
        Line(
            "If you record that the provider never received it, a second operator must approve "
            "the retry; until then the effect stays unknown and its review item open."
        ),
        Line("Nothing is sent until then: no money moves."),
    )


def _extra_attempt(effect: Effect, facts: _Facts, action: str) -> Preview:
    ground = _ground(effect, facts)
    if not ground:
        return _refused(effect, action, "A resend could do it twice: one more attempt is unsafe.")
    return _resend(effect, facts, action, ground, extra_attempt=True)


def _refused(effect: Effect, action: str, why: str) -> Preview:
    return _unchanged(
        effect, action, f"{why} The ledger will refuse this decision; nothing changes."
    )


def _approve(effect: Effect, facts: _Facts, action: str) -> Preview:
    if effect.status == Status.UNKNOWN:  # a proposed retry: the second pair of eyes
        return _resend(effect, facts, action, VERIFIED_ABSENT)
    return _released(effect, facts, action)


def _released(effect: Effect, facts: _Facts, action: str) -> Preview:
    """An effect above its approval threshold, approved: planned, sent for the first time."""
    money = money_of(effect)
    if effect.kind == Kind.COMPENSATION and can_execute(effect.tool):
        actor, who = LEDGER, f"The ledger sends it itself through {effect.tool}."
    elif effect.requested_by == RequestedBy.OPERATOR:
        actor, who = PERSON, _BY_HAND
    else:
        actor, who = AGENT, f"Agent {effect.agent.name} may now claim and send it."
    lines = [Line("The effect becomes planned."), Line(who)]
    if money:
        lines.append(Line("Sending it moves", money=money))
    lines += _dependents(effect, facts, Status.PLANNED)
    return replace(_base(effect, action, Status.PLANNED, actor, *lines), money_moves=bool(money))


def _reject(effect: Effect, facts: _Facts, action: str) -> Preview:
    waits, asker = waits_for_second_pair(effect)
    if effect.status == Status.UNKNOWN:
        who = f" {asker}'s" if waits and asker else " the"
        return _base(
            effect,
            action,
            Status.UNKNOWN,
            PERSON,
            Line(f"The proposed retry is dropped:{who} proposal closes; nothing is sent."),
            Line("The effect stays unknown and its review item stays open for another decision."),
        )
    return _cancel(effect, facts, action)


def _compensate(effect: Effect, facts: _Facts, action: str) -> Preview:
    tool = facts.policy.compensated_by
    money = money_of(effect)
    if not tool:
        return _base(
            effect,
            action,
            effect.status,
            PERSON,
            Line(f"{effect.tool} declares no compensating tool: name one in the form."),
        )
    lines = [Line("The effect stays confirmed until the compensation is confirmed.")]
    if can_execute(tool):
        actor = LEDGER
        lines.append(
            Line(f"The ledger sends the compensation itself, through {tool}, after the decision:")
        )
    else:
        actor = PERSON
        lines.append(
            Line(
                f"Nobody can send {tool} automatically: it waits, planned, for a person to carry "
                "it out and confirm it (a review item opens)."
            )
        )
    if money:
        lines.append(Line("It refunds", money=money))
    else:
        lines.append(Line("It undoes what the compensation request in the form names."))
    if facts.item is not None and facts.item.reason == Reason.DUPLICATE:
        # ledger.effects.compensation(duplicate=True): the provider's second charge is undone.
        lines.append(
            Line(
                "It refunds the provider's duplicate, named in the form: once that is "
                "confirmed, the effect stays confirmed, its own charge standing."
            )
        )
        return replace(_base(effect, action, Status.CONFIRMED, actor, *lines), money_moves=True)
    lines.append(Line("Once the provider confirms it, the effect becomes compensated."))
    active = active_dependents(effect)
    if active:
        lines.append(
            Line(
                f"{_count(len(active), 'dependent')} may have acted on it already: the ledger "
                "refuses unless you force it, and they may need compensating too."
            )
        )
    lines += _dependents(effect, facts, Status.COMPENSATED, compensating=True)
    return replace(_base(effect, action, Status.CONFIRMED, actor, *lines), money_moves=True)


def _dependents(
    effect: Effect, facts: _Facts, status: Status, *, compensating: bool = False
) -> list[Line]:
    """What the dependents still waiting (planned, awaiting approval) will do once the effect is
    in `status`. The one rule (`ledger.effects.interlocks.blocking`): an upstream holds its
    dependents
    back until it is confirmed with no compensation in flight; one that can never be confirmed
    again (`UPSTREAM_DEAD`) has them cancelled (`ledger.effects.transitions`)."""
    waiting = [(d, ups) for d, s, ups in facts.dependents if s in CANCELLABLE]
    # Sent, or settled as done: they may have relied on it (`ledger.effects.compensation`).
    acted = [d for d, s, _ in facts.dependents if s not in CANCELLABLE | UPSTREAM_DEAD]
    lines: list[Line] = []
    if compensating:
        if waiting:
            lines.append(
                Line(
                    f"{_count(len(waiting), 'waiting dependent')} will be held back while the "
                    "compensation is in flight, and cancelled once it is confirmed."
                )
            )
    elif status in UPSTREAM_DEAD and waiting:
        lines.append(Line(f"{_count(len(waiting), 'waiting dependent')} will be cancelled."))
    elif status == Status.CONFIRMED and waiting:
        others = [d for d, ups in waiting if any(u.blocking for u in ups if u.id != str(effect.pk))]
        freed = len(waiting) - len(others)
        if freed:
            lines.append(Line(f"{_count(freed, 'waiting dependent')} will be unblocked."))
        if others:
            lines.append(
                Line(
                    f"{_count(len(others), 'waiting dependent')} will stay blocked by another "
                    "upstream."
                )
            )
    elif waiting:
        lines.append(
            Line(
                f"{_count(len(waiting), 'waiting dependent')} will stay blocked until it is "
                "confirmed."
            )
        )
    if acted and status in UPSTREAM_DEAD and not compensating:
        lines.append(
            Line(
                f"{_count(len(acted), 'dependent')} already sent may have relied on it and may "
                "need compensating."
            )
        )
    return lines


def _deadlines(effect: Effect, facts: _Facts) -> list[Line]:
    """The times the operator decides against."""
    lines = []
    if effect.status == Status.DISPATCHING and effect.lease_expires_at:
        lines.append(
            Line(
                f"{effect.lease_owner or 'The agent'}'s lease runs out",
                when=effect.lease_expires_at,
            )
        )
    if effect.confirm_deadline:
        lines.append(Line("The provider's confirmation is due", when=effect.confirm_deadline))
    if facts.item is not None:
        lines.append(Line("The review item is due", when=facts.item.due_at))
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


_BUILDERS = {
    CONFIRM: _confirm,
    FAIL: _fail,
    CANCEL: _cancel,
    RETRY: _retry,
    COMPENSATE: _compensate,
    APPROVE: _approve,
    REJECT: _reject,
    NOT_DUPLICATE: _closes,
    ACCEPT_RECORD: _accept_record,
    EXTRA_ATTEMPT: _extra_attempt,
}
