"""Why sending an effect again cannot do it twice: the one question behind a retry, one more
attempt and an approved retry proposal, asked the same way by the decision (`decide`), its
preview (`reviews.decisions.whatnext`) and its suggestion (`suggest`).

A planned effect was never sent, so it cannot have been done (`NEVER_SENT`); any other is
judged by the ledger's one rule, `ledger.effects.recovery.retry_ground`, on the provider's
latest lookup."""

from __future__ import annotations

from datetime import datetime

from ledger.effects.recovery import database_now, retry_ground
from ledger.models import Effect
from ledger.models.states import Status
from ledger.policy.tools import Policy, policy_for
from reviews.decisions.evidence import Evidence

# The ground of a planned effect: it was never sent.
NEVER_SENT = "planned"


def resend_ground(
    effect: Effect,
    evidence: Evidence,
    *,
    policy: Policy | None = None,
    now: datetime | None = None,
    verified_absent: bool = False,
) -> str:
    """Why a resend cannot do `effect` twice ("" when it could). `policy` and `now` default to
    the tool's policy and the database's clock; `verified_absent` is an operator's recorded
    word that the provider never received it."""
    if effect.status == Status.PLANNED:
        return NEVER_SENT
    return retry_ground(
        effect,
        policy if policy is not None else policy_for(effect.tool),
        now=now if now is not None else database_now(),
        last_lookup=evidence.lookup_outcome,
        verified_absent=verified_absent,
    )
