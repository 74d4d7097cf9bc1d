"""An agent's calls about an effect it recorded, one function per call of the agent API
(docs/api.md): read it, claim it, renew its lease, report its outcome, cancel it, compensate
it. Each reads the caller's own effect first (another agent's is 404, so that its existence
does not leak) and returns an `Answer`: the effect as the call leaves it and the effects it
depends on, which is what the API shows. Recording an intent is `ledger.effects.intake`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ledger.effects import transitions
from ledger.effects.compensation import compensate
from ledger.effects.hotpath import read_effect, record_simple_outcome
from ledger.effects.outcomes import record_outcome
from ledger.errors import NotFound, OperatorDecided
from ledger.models import Agent, Effect, Halt, RequestedBy
from ledger.models.states import Status
from ledger.observability import logcontext
from ledger.policy.redaction import scrub_cards
from ledger.policy.tools import policy_for
from ledger.rules.halts import active_halt_for
from ledger.rules.interlocks import Upstream, upstreams_of


@dataclass(frozen=True)
class ClaimTerms:
    """A claim as an agent asks for it: who claims (`owner`), the claim's own id, which makes a
    retried claim a repeat (`claim_id`), and the lease it asks for (`lease_seconds`; None for
    the default). The tool's policy decides the lease (`Policy.lease_for`)."""

    owner: str = ""
    claim_id: str | None = None
    lease_seconds: int | None = None


@dataclass(frozen=True)
class Answer:
    """An effect as a call leaves it (an `Effect`, or the success path's `EffectRow`), the
    effects it depends on, whether this call recorded it (`created`) and whether the caller
    holds its lease, so that the answer carries it (`claimed`)."""

    effect: Any
    upstream: list[Upstream]
    created: bool = False
    claimed: bool = False


@dataclass(frozen=True)
class Renewed(Answer):
    """A renewed lease, and the halt that now covers the effect, if one does: the work in
    flight may still report, but the client can stop before it sends anything more."""

    halt: Halt | None = None


def actor_of(agent: Agent) -> str:
    """How an agent's moves are recorded in the effect's events."""
    return f"agent:{agent.name}"


def own_effect(agent: Agent, effect_id: uuid.UUID) -> Effect:
    """The caller's effect; another agent's effect is 404, so its existence does not leak."""
    # Raw: this runs on every call about one effect, and building the ORM query costs more
    # than the indexed primary-key read.
    effect = transitions.one_effect(
        f"SELECT * FROM {Effect._meta.db_table} WHERE id = %s AND agent_id = %s",
        [effect_id, agent.id],
    )
    if effect is None:
        raise NotFound("No such effect.")
    logcontext.bind(run_id=effect.run_id)
    return effect


def upstream_of(effect: Any) -> list[Upstream]:
    """The effects `effect` depends on (one read)."""
    return upstreams_of([effect.id]).get(str(effect.id), [])


def answer(effect: Any, *, created: bool = False, claimed: bool = False) -> Answer:
    return Answer(effect, upstream_of(effect), created=created, claimed=claimed)


def _agents_to_act_on(effect: Any) -> None:
    """Refuse an agent's claim, outcome or cancel of an effect an operator decided (a refund,
    also while it awaits a second operator): it is recorded under the agent whose effect it
    undoes, but only the ledger's executor or an operator carries it out."""
    if effect.requested_by == RequestedBy.OPERATOR:
        raise OperatorDecided(
            "An operator decided this effect: the ledger or an operator carries it out, and "
            "its agent may read it but not claim, report on or cancel it."
        )


def read_own(agent: Agent, effect_id: uuid.UUID) -> Answer:
    return answer(own_effect(agent, effect_id))


def claim_own(agent: Agent, effect_id: uuid.UUID, terms: ClaimTerms) -> Answer:
    """`planned → dispatching` with a lease (`transitions.claim`); the answer carries it."""
    effect = own_effect(agent, effect_id)
    _agents_to_act_on(effect)
    effect, _ = transitions.claim(
        effect,
        owner=terms.owner,
        claim_id=terms.claim_id,
        lease_seconds=policy_for(effect.tool).lease_for(terms.lease_seconds),
        actor=actor_of(agent),
    )
    return answer(effect, claimed=True)


def renew_lease(
    agent: Agent, effect_id: uuid.UUID, *, token: str, lease_seconds: int | None
) -> Renewed:
    """Extend the live lease `token` holds (`transitions.heartbeat`). Still accepted while
    halted (the work in flight must be able to report back); the answer names the halt."""
    effect = own_effect(agent, effect_id)
    effect = transitions.heartbeat(
        effect,
        token=token,
        # Never shorter than the tool's call_timeout, as a claim's (a call in flight must be
        # able to finish inside the lease it runs on).
        lease_seconds=policy_for(effect.tool).lease_for(lease_seconds),
    )
    halt = active_halt_for(effect)
    return Renewed(effect, upstream_of(effect), claimed=True, halt=halt)


def end_gone_lease(agent: Agent, effect_id: uuid.UUID, *, owner: str) -> Answer:
    """End the live lease of `owner`, a process of the caller's that is gone
    (`transitions.end_lease`); the effect's recovery can then begin at once."""
    effect = own_effect(agent, effect_id)
    _agents_to_act_on(effect)
    return answer(transitions.end_lease(effect, owner=owner, actor=actor_of(agent)))


def report_outcome(
    agent: Agent,
    effect_id: uuid.UUID,
    *,
    token: str,
    status: str,
    provider_ref: str,
    response: Any,
    error: Any,
) -> Answer:
    """What the provider did, reported by the lease holder: on the success path one read and
    one fenced statement (`hotpath.record_simple_outcome`), else the general path's
    `outcomes.record_outcome`, which has every rule (a stale token, a late report, …)."""
    row = read_effect(effect_id, agent.id)
    if row is None:
        raise NotFound("No such effect.")
    logcontext.bind(run_id=row.run_id)
    _agents_to_act_on(row)
    report = {
        "token": token,
        "status": status,
        "provider_ref": provider_ref,
        "response": response,
        "error": error,
        "actor": actor_of(agent),
        "policy": policy_for(row.tool),
    }
    simple = record_simple_outcome(row, **report)
    if simple is not None:
        return Answer(simple, upstream_of(simple) if simple.has_upstream else [])
    moved, _ = record_outcome(own_effect(agent, effect_id), **report)
    return answer(moved)


def cancel_own(agent: Agent, effect_id: uuid.UUID, reason: str) -> Answer:
    """`planned → cancelled`; an effect cancelled already is answered as it is."""
    effect = own_effect(agent, effect_id)
    _agents_to_act_on(effect)
    if effect.status == Status.CANCELLED:
        return answer(effect)
    reason = scrub_cards(reason) or "cancelled by agent"
    moved = transitions.transition(
        effect, Status.CANCELLED, actor=actor_of(agent), reason=reason, data={"reason": reason}
    )
    return answer(moved)


def compensate_own(
    agent: Agent,
    effect_id: uuid.UUID,
    *,
    tool: str | None,
    request: dict[str, Any],
    reason: str,
    compensation_key: str | None,
) -> Answer:
    """Record a compensation of the caller's confirmed effect (`compensation.compensate`);
    `created` is False for one recorded before under the same key."""
    effect, created = compensate(
        agent,
        own_effect(agent, effect_id),
        tool=tool,
        request=request,
        reason=reason,
        compensation_key=compensation_key,
        actor=actor_of(agent),
    )
    return answer(effect, created=created)
