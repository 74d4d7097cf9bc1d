"""What happens after a decision, in sentences: the pieces every decision kind's preview is built
from (`reviews.decisions.kinds`), and the facts they read.

Nothing here decides anything: every sentence is read off the rule that will apply, asked the
way the code that applies it asks — `ledger.effects.recovery.plan_for` on the would-be state for
what the agent's `/recovery` will answer, `reviews.decisions.grounds` for why a resend cannot do
the effect twice, `ledger.rules.interlocks` for which upstreams hold a dependent back,
`reconcilers.execution.can_execute` for whether the ledger sends a refund itself.

The page renders one preview per offered decision, so the facts every preview needs (the
database clock, the open review item, the dependents and their upstreams) are read once per
effect version and kept on the effect instance (`facts_of`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from datetime import datetime

from ledger.effects.recovery import (
    HONOURS_KEY,
    NOT_FOUND,
    READ_ONLY,
    RETRY_SAFE,
    VERIFIED_ABSENT,
    Plan,
    database_now,
    plan_for,
)
from ledger.models import Effect, EffectDependency, RequestedBy, ReviewItem
from ledger.models.states import CANCELLABLE, UPSTREAM_DEAD, Kind, Status
from ledger.policy.iso4217 import major_units
from ledger.policy.tools import Policy, policy_for
from ledger.rules.halts import halted_among
from ledger.rules.interlocks import Upstream, upstreams_of
from reconcilers.execution import can_execute
from reviews.decisions.evidence import Evidence, evidence_of
from reviews.decisions.grounds import NEVER_SENT

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
class Facts:
    """What every preview of one effect version reads: once per page, not once per form."""

    now: datetime
    policy: Policy
    item: ReviewItem | None
    # What the provider has said of it: the latest lookup, the latest record it sent.
    evidence: Evidence
    # The effect's own upstreams, and each dependent's status and upstreams (this effect among
    # them), as `ledger.rules.interlocks` reads them.
    upstreams: tuple[Upstream, ...]
    # An active halt covers it (`ledger.containment.halts`): planned again, it could not be
    # claimed now.
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


def facts_of(effect: Effect) -> Facts:
    """The facts of the effect as it is (its version), read once and kept on the instance."""
    cached = getattr(effect, "_preview_facts", None)
    if cached is not None and cached[0] == effect.version:
        return cached[1]
    downstream = list(
        EffectDependency.objects.filter(upstream_id=effect.pk)
        .order_by("id")
        .values_list("downstream_id", "downstream__status")
    )
    ups = upstreams_of([effect.pk, *(d for d, _ in downstream)])
    facts = Facts(
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


def base(effect: Effect, action: str, status: str, actor: str, *lines: Line) -> Preview:
    return Preview(action=action, status=status, actor=actor, agent=effect.agent.name, lines=lines)


def unchanged(effect: Effect, action: str, text: str) -> Preview:
    """The effect stays as it is and a person acts next."""
    return base(effect, action, effect.status, PERSON, Line(text))


def refused(effect: Effect, action: str, why: str) -> Preview:
    """A decision the ledger will refuse as things stand."""
    return unchanged(
        effect, action, f"{why} The ledger will refuse this decision; nothing changes."
    )


def closes_only(effect: Effect, action: str) -> Preview:
    """The review item closes and the effect stays as it is."""
    return base(
        effect,
        action,
        effect.status,
        NOBODY,
        Line(f"The review item closes; the effect stays {effect.status}."),
        Line("Nothing is sent: no money moves; its dependents are not affected."),
    )


# What an operator decided and the ledger cannot send: its agent may not claim it.
BY_HAND = (
    "A person carries it out by hand and records it as done (Confirm); its agent may not "
    "claim it, since an operator decided it."
)

_WHY_SAFE = {
    NEVER_SENT: "it was never sent.",
    READ_ONLY: "the tool only reads.",
    HONOURS_KEY: "the provider honours the idempotency key while it remembers it, so a charge "
    "it already made is answered, not repeated.",
    NOT_FOUND: "the provider's lookup found nothing under the key, and it honours the key.",
    VERIFIED_ABSENT: "two operators recorded that the provider never received it.",
}


def _would_be_planned(effect: Effect, *, extra_attempt: bool = False) -> Effect:
    """The effect as a resend leaves it (back to planned, checks reset; `extra_attempt`: with
    one attempt more allowed)."""
    after = copy.copy(effect)
    after.status = Status.PLANNED
    after.next_check_at, after.checks, after.confirm_deadline = None, 0, None
    if extra_attempt:
        after.max_attempts = effect.max_attempts + 1
    return after


def resend(
    effect: Effect, facts: Facts, action: str, ground: str, *, extra_attempt: bool = False
) -> Preview:
    """Back to planned: who sends it again, what their `/recovery` answers, and why the resend
    cannot do it twice (`ground`, `reviews.decisions.grounds`)."""
    after = _would_be_planned(effect, extra_attempt=extra_attempt)
    plan = plan_for(
        after,
        facts.policy,
        blocked=any(u.blocking for u in facts.upstreams),
        now=facts.now,
        halted=facts.halted,
    )
    lines = [
        Line(
            f"The effect returns to planned (attempt {after.attempt} of {after.max_attempts} used)."
        )
    ]
    actor, sender = _who_resends(effect, facts)
    lines += sender
    if actor != PERSON:  # by hand, its agent's /recovery answers wait (operator_decided)
        lines.append(_recovery_answer(effect, plan))
    money = money_of(effect)
    lines += _money_lines(money, facts.policy, _WHY_SAFE.get(ground, ""))
    lines += dependents(effect, facts, Status.PLANNED)
    return replace(
        base(effect, action, Status.PLANNED, actor, *lines),
        recovery=plan if actor == AGENT else None,
        money_moves=bool(money) and not facts.policy.read_only,
    )


def _who_resends(effect: Effect, facts: Facts) -> tuple[str, list[Line]]:
    """Who sends the effect again once it is planned: the ledger itself (a compensation its
    adapter can send), a person (an operator's own request, by hand), or its agent."""
    if effect.kind == Kind.COMPENSATION and can_execute(effect.tool):
        return LEDGER, [Line(f"The ledger sends it again itself through {effect.tool}.")]
    if effect.requested_by == RequestedBy.OPERATOR:
        return PERSON, [Line(BY_HAND)]
    agent, key = effect.agent.name, effect.idempotency_key
    return AGENT, [
        Line(
            f"The ledger does not resend it: agent {agent} does, with the same idempotency "
            f"key {key}."
        ),
        Line(
            f"Once it claims it, its lease runs {facts.policy.lease_for(None)} s unless it "
            "asks for another; still out after that, it goes through recovery again."
        ),
    ]


def _recovery_answer(effect: Effect, plan: Plan) -> Line:
    """What the owning agent's `/recovery` will answer for the effect once it is planned."""
    agent = effect.agent.name
    if plan.action == RETRY_SAFE:
        return Line(f"{agent}'s /recovery will answer {plan.action} ({plan.reason}).")
    return Line(f"{agent}'s /recovery will answer {plan.action} ({plan.reason}): it waits.")


def _money_lines(money: str, policy: Policy, why: str) -> list[Line]:
    """Whether the resend moves money, and why it cannot do so twice."""
    if policy.read_only:
        return [Line(f"No money moves: {why}")]
    if money:
        return [Line("The resend may charge", money=money), Line(f"It cannot charge twice: {why}")]
    return [Line(f"It cannot be done twice: {why}")]


def released(effect: Effect, facts: Facts, action: str) -> Preview:
    """An effect above its approval threshold, approved: planned, sent for the first time."""
    money = money_of(effect)
    if effect.kind == Kind.COMPENSATION and can_execute(effect.tool):
        actor, who = LEDGER, f"The ledger sends it itself through {effect.tool}."
    elif effect.requested_by == RequestedBy.OPERATOR:
        actor, who = PERSON, BY_HAND
    else:
        actor, who = AGENT, f"Agent {effect.agent.name} may now claim and send it."
    lines = [Line("The effect becomes planned."), Line(who)]
    if money:
        lines.append(Line("Sending it moves", money=money))
    lines += dependents(effect, facts, Status.PLANNED)
    return replace(base(effect, action, Status.PLANNED, actor, *lines), money_moves=bool(money))


def dependents(
    effect: Effect, facts: Facts, status: Status, *, compensating: bool = False
) -> list[Line]:
    """What the dependents still waiting (planned, awaiting approval) will do once the effect is
    in `status`. The one rule (`ledger.rules.interlocks.blocking`): an upstream holds its
    dependents back until it is confirmed with no compensation in flight; one that can never be
    confirmed again (`UPSTREAM_DEAD`) has them cancelled (`ledger.effects.transitions`)."""
    waiting = [(d, ups) for d, s, ups in facts.dependents if s in CANCELLABLE]
    # Sent, or settled as done: they may have relied on it (`ledger.effects.compensation`).
    acted = [d for d, s, _ in facts.dependents if s not in CANCELLABLE | UPSTREAM_DEAD]
    lines = _waiting_lines(effect, waiting, status, compensating)
    if acted and status in UPSTREAM_DEAD and not compensating:
        lines.append(
            Line(
                f"{count(len(acted), 'dependent')} already sent may have relied on it and may "
                "need compensating."
            )
        )
    return lines


def _waiting_lines(
    effect: Effect,
    waiting: list[tuple[str, tuple[Upstream, ...]]],
    status: Status,
    compensating: bool,
) -> list[Line]:
    """What the dependents still waiting will do."""
    if not waiting:
        return []
    if compensating:
        return [
            Line(
                f"{count(len(waiting), 'waiting dependent')} will be held back while the "
                "compensation is in flight, and cancelled once it is confirmed."
            )
        ]
    if status in UPSTREAM_DEAD:
        return [Line(f"{count(len(waiting), 'waiting dependent')} will be cancelled.")]
    if status != Status.CONFIRMED:
        return [
            Line(
                f"{count(len(waiting), 'waiting dependent')} will stay blocked until it is "
                "confirmed."
            )
        ]
    others = [d for d, ups in waiting if any(u.blocking for u in ups if u.id != str(effect.pk))]
    freed = len(waiting) - len(others)
    lines = []
    if freed:
        lines.append(Line(f"{count(freed, 'waiting dependent')} will be unblocked."))
    if others:
        stays = count(len(others), "waiting dependent")
        lines.append(Line(f"{stays} will stay blocked by another upstream."))
    return lines


def deadlines(effect: Effect, facts: Facts) -> list[Line]:
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


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
