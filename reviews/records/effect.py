"""One effect as the effect page shows it: the effect, its events, its review items, the
decisions and compensations made of it, what it depends on and what depends on it, and the
statement lines that name it (`record_of`, a query each); ours against the provider's own record
(`compared`); the effect a decision is posted on, and a decision just taken (`decision_taken`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from ledger.models import Effect, EffectDependency, EffectEvent, ReviewItem, StatementLine
from ledger.models.states import Kind
from ledger.policy.money import value_at
from ledger.policy.tools import policy_for
from reviews.access.teams import Person, effect_or_404
from reviews.records.statements import shown_lines

REDACTED = "redacted"


@dataclass(frozen=True)
class EffectRecord:
    """Everything the ledger holds of one effect that its page shows."""

    effect: Effect
    events: list[EffectEvent]  # oldest first
    reviews: list[ReviewItem]  # newest first, with who is assigned and who resolved
    children: list[Effect]  # its decisions and compensations, oldest first
    upstream: list[EffectDependency]  # what it depends on, with the upstream effect
    downstream: list[EffectDependency]  # what depends on it, with the downstream effect
    statement_lines: list[StatementLine]  # every line that names it, amounts in major units

    @property
    def open_review(self) -> ReviewItem | None:
        return next((r for r in self.reviews if r.resolved_at is None), None)

    @property
    def decisions(self) -> list[Effect]:
        return [c for c in self.children if c.kind == Kind.DECISION]

    @property
    def compensations(self) -> list[Effect]:
        return [c for c in self.children if c.kind == Kind.COMPENSATION]


def record_of(user: Person, effect_id: uuid.UUID | str) -> EffectRecord:
    """The effect and what surrounds it, read once; another team's effect is a 404, like a
    missing one (ADR 0014)."""
    effect = effect_or_404(
        user, effect_id, Effect.objects.select_related("agent", "parent", "parent__agent")
    )
    return EffectRecord(
        effect=effect,
        events=list(EffectEvent.objects.filter(effect=effect).order_by("id")),
        reviews=list(
            ReviewItem.objects.filter(effect=effect)
            .select_related("assignee", "resolved_by")
            .order_by("-opened_at")
        ),
        children=list(Effect.objects.filter(parent=effect).order_by("created_at", "id")),
        upstream=list(
            EffectDependency.objects.filter(downstream=effect)
            .select_related("upstream")
            .order_by("upstream__created_at")
        ),
        downstream=list(
            EffectDependency.objects.filter(upstream=effect)
            .select_related("downstream")
            .order_by("downstream__created_at")
        ),
        # Every line that names it, current or revised away, whatever the statement's period
        # (stmline_effect_idx).
        statement_lines=shown_lines(
            StatementLine.objects.filter(effect_id=effect.pk)
            .select_related("statement")
            .order_by("statement__period_start", "statement_id", "line_no")
        ),
    )


def effect_to_decide(user: Person, effect_id: uuid.UUID | str) -> Effect:
    """The effect a decision is posted on: one the person may see, and not itself a decision."""
    return effect_or_404(user, effect_id, Effect.objects.filter(~Q(kind=Kind.DECISION)))


def decision_taken(effect_id: uuid.UUID | str, decided: str) -> Effect | None:
    """The decision `decided` (an id from the page's address after a decision) recorded on the
    effect; None for anything else."""
    try:
        decision_id = uuid.UUID(decided)
    except ValueError:
        return None
    return Effect.objects.filter(pk=decision_id, parent_id=effect_id, kind=Kind.DECISION).first()


def _redacted(value: Any) -> bool:
    return isinstance(value, dict) and value.get("redacted") is True


def _field(value: Any, path: str) -> str:
    """A field of a redacted-or-not payload as text: "redacted" when the payload was redacted
    (retention purges requests and records to `{"redacted": true}`), "—" when absent."""
    if _redacted(value):
        return REDACTED
    found = value_at(value, path)
    if found is None or found == "":
        return "—"
    return REDACTED if _redacted(found) else str(found)


# Row of the comparison: (label, the mismatch names that mark it differing).
_COMPARED_ROWS = (
    ("Amount", ("amount",)),
    ("Currency", ("currency",)),
    ("Target (account)", ("account", "target")),
    ("Status", ("status",)),
    ("Provider reference (id)", ("id", "provider_ref")),
)


def compared(effect: Effect, event: EffectEvent | None) -> dict[str, Any] | None:
    """Ours against the provider's record that `event` carries (the latest event that carries
    one, `reviews.decisions.evidence`: a reconciliation, or a webhook held for review); None
    when no event does."""
    if event is None:
        return None
    # Only now: the tool's paths are read (and cached) for effects that have a record.
    policy = policy_for(effect.tool)
    record = event.data["record"]
    mismatches = event.data.get("mismatches")
    differs = {str(m) for m in mismatches} if isinstance(mismatches, list) else set()
    request = effect.request
    ours = (
        _field(request, policy.amount_path or "amount"),
        _field(request, policy.currency_path or "currency"),
        effect.target or "—",
        effect.status,
        effect.provider_ref or "—",
    )
    account = "account" if value_at(record, "account") is not None else "target"
    theirs = (
        _field(record, "amount"),
        _field(record, "currency"),
        _field(record, account),
        _field(record, "status"),
        _field(record, "id"),
    )
    rows = [
        {"label": label, "ours": mine, "theirs": their, "differs": bool(differs & set(names))}
        for (label, names), mine, their in zip(_COMPARED_ROWS, ours, theirs, strict=True)
    ]
    return {"event": event, "rows": rows, "record_redacted": _redacted(record)}
