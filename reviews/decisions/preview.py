"""What happens after a decision, before it is taken; and what recovery will do for a run.

Each decision form on the effect page says what the decision will lead to: the effect's next
state, who acts next (the ledger, the owning agent, a person or nobody) and by when, what its
dependents will do, and whether money moves. Each kind declares how its preview is built
(`reviews.decisions.kinds`), from the sentences and facts of `reviews.decisions.whatnext`;
`preview_for` adds the deadlines every preview shows.
"""

from __future__ import annotations

from dataclasses import replace

from ledger.models import Effect
from reviews.decisions.kinds import kind_of
from reviews.decisions.whatnext import (
    AGENT,
    LEDGER,
    NOBODY,
    PERSON,
    Facts,
    Line,
    Preview,
    deadlines,
    facts_of,
    unchanged,
)

__all__ = ["AGENT", "LEDGER", "NOBODY", "PERSON", "Line", "Preview", "preview_for"]


def preview_for(effect: Effect, action: str) -> Preview:
    """What `action` on `effect` will lead to (rendered by `reviews/_preview.html`). Any action
    name gives a preview: one no kind declares gets a generic one."""
    facts = facts_of(effect)
    kind = kind_of(action)
    build = kind.preview if kind is not None else _generic
    preview = build(effect, facts, action)
    return replace(preview, lines=(*preview.lines, *deadlines(effect, facts)))


def _generic(effect: Effect, facts: Facts, action: str) -> Preview:
    return unchanged(
        effect,
        action,
        "This page cannot say in advance what this decision does; check the effect after.",
    )
