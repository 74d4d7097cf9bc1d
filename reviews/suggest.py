"""The decision the evidence suggests for a review item, pre-filled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Suggestion:
    action: str  # one of reviews.decisions.ACTIONS (or a new kind)
    label: str  # what the button says, e.g. "Confirm (the lookup found ch_123)"
    initial: dict[str, Any] = field(default_factory=dict)  # the decision form's pre-filled fields


def suggestion(effect: Any, item: Any) -> Suggestion | None:
    return None


def suggest_for_rows(items: Sequence[Any]) -> dict[int, Suggestion]:
    """Suggestions for a page of queue rows, keyed by item id, in a constant number of queries."""
    return {}
