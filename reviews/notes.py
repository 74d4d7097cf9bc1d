"""Notes on review items, and who is working on one (the soft lock a claim is)."""

from __future__ import annotations

from typing import Any


def panel(effect: Any, open_item: Any, user: Any) -> dict[str, Any]:
    """Context for the effect page's notes-and-ownership panel (`reviews/_item_panel.html`)."""
    return {}


def keep_lost_decision(effect_id: Any, user: Any, ask: Any, refusal: Any) -> None:
    """Keep the evidence of a decision that lost a race as a note on the open item."""
