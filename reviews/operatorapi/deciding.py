"""A decision through the operator API: `reviews.decisions.decide` with channel "api", as the
token's person, so every rule of the page holds and its refusals are the page's (403
`outside_teams` or `not_an_operator`, 409 with the reason code, 422 with `fields`); a token
that names teams reaches only their effects."""

from __future__ import annotations

import uuid
from typing import Any

from ledger.errors import NotFound
from ledger.models import Effect
from ledger.observability import logcontext
from ledger.policy.teams import effects_q
from reviews.decisions.decide import AlreadyDecided, Ask, OutsideTeams, decide
from reviews.decisions.kinds import KINDS
from reviews.models import OperatorToken as Token
from reviews.operatorapi.schemas import DecisionIn
from reviews.queue import notes


def _ask(payload: DecisionIn, token: Token) -> Ask:
    """The ask as the page's form makes it: a field the action does not read never decides."""
    shown = KINDS[payload.action].fields
    return Ask(
        action=payload.action,
        reason=payload.reason,
        expected_version=payload.expected_version,
        provider_ref=payload.provider_ref,
        evidence=payload.evidence,
        verified_absent=payload.verified_absent and "verified_absent" in shown,
        compensation_tool=payload.compensation_tool if "compensation_tool" in shown else "",
        compensation_request=payload.compensation_request,
        force=payload.force and "force" in shown,
        over_hold=payload.over_hold,
        channel="api",
        via=f"token {token.pk} ({token.shown})",
    )


def decide_as(token: Token, effect_id: uuid.UUID, payload: DecisionIn) -> dict[str, Any]:
    """Take `payload` on the effect as the token's person; the decision's answer."""
    if not Effect.objects.filter(pk=effect_id).exists():
        raise NotFound("No such effect.")
    logcontext.bind(effect_id=effect_id)
    # The token's own teams, when it names some; the person's are `decide`'s to check.
    named = frozenset(token.teams.values_list("pk", flat=True))
    if named and not Effect.objects.filter(effects_q(named), pk=effect_id).exists():
        raise OutsideTeams(
            f"The token {token.shown} reaches only the effects of the teams it names; this "
            "effect belongs to another."
        )
    ask = _ask(payload, token)
    try:
        decided = decide(effect_id, ask, user=token.user)
    except AlreadyDecided as exc:
        # As on the page: the loser's evidence stays on the item as a note.
        notes.keep_lost_decision(effect_id, token.user, ask, exc)
        raise
    return {
        "decision_id": decided.decision.pk,
        "action": decided.decision.provenance.get("action"),
        "channel": "api",
        "effect_id": decided.target.pk,
        "status": decided.target.status,
        "version": decided.target.version,
        "follow_up": decided.follow_up.pk if decided.follow_up else None,
    }
