"""Which channels take an alert: the team's own when the alert is about something a team owns
and that team has channels, the global ones otherwise (ADR 0014).

What an alert is about is read from its payload, in this order: an effect (`effect_id`: the
effect's team, by its tool else its agent), a tool (`tool`), a halt's target (`scope`/`value`),
a limit's holder (`limit.which`, "tool:<name>:…" or "agent:<name>:…"). An alert about nothing of a
team (a global halt, restore mode, an untagged tool) goes to the global channels.

A team's channels are named `team:<slug>:<channel>` in the alert's `delivered`, so each is
retried on its own, at least once, with the alert's id as the Idempotency-Key as everywhere; a
failing team channel is a failed attempt of that alert alone, never of other teams' alerts or
the global ones (the sender's rule, `reviews.alerts.sender`). A lookup that fails (a team
deleted meanwhile) falls back to the global channels rather than losing the alert.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import partial
from typing import Any

from ledger.models import Agent, Effect, Team
from ledger.policy.teams import team_of_effect, team_of_tool
from ledger.rules.outbox import Leased
from reviews.alerts.channels import channels, send_email, send_webhook

log = logging.getLogger("reviews.alerts")

Send = Callable[[Leased], None]
_LIMIT_SUFFIX = re.compile(r":(claims_per_minute|amount_per_day(:[^:]*)?)$")


def _by_name(model: Any, name: str) -> Team | None:
    row = model.objects.filter(name=name).select_related("team").first()
    return row.team if row is not None else None


def _limit_holder(which: str) -> Team | None:
    """The team of a limit's holder: "tool:<name>:claims_per_minute", "agent:<name>:…"."""
    scope, _, rest = which.partition(":")
    name = _LIMIT_SUFFIX.sub("", rest)
    if scope == "tool":
        return team_of_tool(name)
    if scope == "agent":
        return _by_name(Agent, name)
    return None


def team_of(payload: dict[str, Any]) -> Team | None:
    """The team an alert is about, or None."""
    if effect_id := payload.get("effect_id"):
        effect = Effect.objects.filter(pk=effect_id).values("tool", "agent_id").first()
        if effect is not None:
            return team_of_effect(effect["tool"], effect["agent_id"])
    if tool := payload.get("tool"):
        return team_of_tool(str(tool))
    scope, value = payload.get("scope"), payload.get("value")
    if scope == "tool" and value:
        return team_of_tool(str(value))
    if scope == "agent" and value:
        return _by_name(Agent, str(value))
    if which := (payload.get("limit") or {}).get("which") or payload.get("which"):
        return _limit_holder(str(which))
    return None


def team_channels(team: Team) -> dict[str, Send]:
    """A team's configured channels, by their names in `delivered`."""
    prefix = f"team:{team.slug}:"
    found: dict[str, Send] = {}
    if team.alert_email:
        found[prefix + "email"] = partial(send_email, to=[team.alert_email])
    if team.alert_webhook_url:
        found[prefix + "webhook"] = partial(send_webhook, url=team.alert_webhook_url, fmt="json")
    if team.alert_slack_url:
        found[prefix + "slack"] = partial(send_webhook, url=team.alert_slack_url, fmt="slack")
    return found


def channels_for(alert: Leased) -> dict[str, Send]:
    """The channels this alert goes to."""
    try:
        team = team_of(alert.payload or {})
    except Exception:  # an odd payload must not stop the alert: the global channels take it
        log.exception("alert %s: its team could not be read", alert.id)
        team = None
    if team is not None and team.has_channels:
        return team_channels(team)
    return channels()
