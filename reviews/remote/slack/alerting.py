"""What an alert carries into Slack to act on: the decisions offered on the effect of a review
item's alert (`blocks.alert_blocks`), or a halt's *Resume* (`halting.halt_blocks`). Only with
Slack's interactivity configured; otherwise, and for any other alert, it stays text.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from ledger.models import AlertKind
from ledger.rules.outbox import Leased
from reviews.remote.offers import effect_of_alert, offer_for
from reviews.remote.slack.blocks import alert_blocks
from reviews.remote.slack.halting import halt_blocks

log = logging.getLogger("reviews.remote.slack")


def blocks_for(alert: Leased, text: str, link: str) -> list[dict[str, Any]] | None:
    """The blocks of an alert's Slack message, or None for a text-only one. The alert is sent
    either way: a failure to read what it offers leaves it text only."""
    if not settings.LEDGER_SLACK_SIGNING_SECRET:
        return None
    try:
        if alert.kind == AlertKind.HALT:
            return halt_blocks(alert.payload, text)
        found = effect_of_alert(alert.payload)
        offer = offer_for(found[0]) if found is not None else None
    except Exception:  # the alert matters more than its buttons
        log.exception("slack: what alert %s offers could not be read", alert.id)
        return None
    if offer is None or not offer.choices:
        return None
    return alert_blocks(text, link, offer)
