"""Taking an agent's intent (`POST /effects`): `take_intent` records it before dispatch, claims
it when the agent asks, and says what the agent is to be told. It owns the choice of path:

- the **success path** (`hotpath.record_new_intent`): a new intent that starts planned, with
  no `depends_on` and no `callback_url`, is one statement, its claim included;
- the **general path**: `intents.record_intent` and `transitions.claim` in one transaction, so
  that a refused claim records nothing; it knows repeats, conflicts, the interlock, four-eyes
  and restore mode.

Four-eyes is answered here: an intent posted with its claim that needs a second operator is
recorded, not claimed (`Taken.awaiting_approval`); the client waits for the decision."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DatabaseError, IntegrityError, transaction

from ledger.effects import transitions
from ledger.effects.agentcalls import Answer, ClaimTerms, actor_of, upstream_of
from ledger.effects.hotpath import EffectRow, record_new_intent
from ledger.effects.intents import Intent, check_agent_key, first_status, record_intent
from ledger.models import Agent
from ledger.models.states import Status
from ledger.observability import logcontext
from ledger.policy.tools import Policy


@dataclass(frozen=True)
class Taken(Answer):
    """An intent taken: `Answer`, and whether a claim was asked for while the effect awaits a
    second operator's approval (recorded, not claimed)."""

    awaiting_approval: bool = False


def take_intent(agent: Agent, intent: Intent, policy: Policy, *, claim: ClaimTerms | None) -> Taken:
    """Record `intent` for `agent` under the tool's `policy`, claimed with it when `claim` is
    given (and the effect can be claimed: planned, or a repeat of one dispatching)."""
    check_agent_key(intent)
    logcontext.bind(run_id=intent.run_id)
    # A callback is posted by the trigger on a status change, which an effect inserted already
    # claimed is not: an intent with a callback_url takes the general path.
    simple = not intent.depends_on and not intent.callback_url
    if simple and first_status(agent, intent, policy) == Status.PLANNED:
        row = _in_one_statement(agent, intent, policy, claim)
        if row is not None:
            logcontext.bind(effect_id=row.id)
            return Taken(row, [], created=True, claimed=claim is not None)
    return _in_one_transaction(agent, intent, policy, claim)


def _in_one_statement(
    agent: Agent, intent: Intent, policy: Policy, claim: ClaimTerms | None
) -> EffectRow | None:
    """The success path; None for a key recorded already, concurrently included (the general
    path sorts out repeats and conflicts)."""
    lease = None
    if claim is not None:
        lease = {
            "owner": claim.owner,
            "claim_id": claim.claim_id,
            "lease_seconds": policy.lease_for(claim.lease_seconds),
        }
    try:
        return record_new_intent(agent, intent, policy, actor=actor_of(agent), claim=lease)
    except IntegrityError:
        return None  # the same key recorded concurrently
    except DatabaseError as exc:
        refused = transitions.trigger_refusal(exc)
        if refused is None:
            raise
        raise refused from None


def _in_one_transaction(
    agent: Agent, intent: Intent, policy: Policy, claim: ClaimTerms | None
) -> Taken:
    """The general path: intent and claim are one transaction, so a refused claim records
    nothing. A new effect is planned, or awaiting_approval (four-eyes), which nobody may claim
    yet; a repeat is claimed only if it is planned, or dispatching (a retried claim)."""
    claimed = False
    with transaction.atomic():
        effect, created = record_intent(agent, intent, policy, actor=actor_of(agent))
        logcontext.bind(effect_id=effect.id)
        if claim is not None and effect.status in (Status.PLANNED, Status.DISPATCHING):
            effect, _ = transitions.claim(
                effect,
                owner=claim.owner,
                claim_id=claim.claim_id,
                lease_seconds=policy.lease_for(claim.lease_seconds),
                actor=actor_of(agent),
            )
            claimed = True
    waits = claim is not None and effect.status == Status.AWAITING_APPROVAL
    return Taken(
        effect, upstream_of(effect), created=created, claimed=claimed, awaiting_approval=waits
    )
