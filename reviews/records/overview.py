"""What the overview names besides its counts (which come from the shared summary,
`reviews.access.counts`): the oldest effect not yet settled and the latest recovery activity,
each read live through an index that finds the few rows shown, in one agent mode or every mode
(`mode` None), of the effects the person may see (ADR 0014)."""

from __future__ import annotations

from django.db.models import Q

from ledger.models import Effect, EffectEvent, EventKind
from ledger.models.states import INCOMPLETE
from reviews.access.teams import Person, visible_effects


def oldest_unresolved(user: Person, mode: str | None) -> Effect | None:
    """The oldest effect still incomplete, with its agent."""
    mine = Q(agent__mode=mode) if mode else Q()
    return (
        visible_effects(user, Effect.objects.filter(mine))
        .filter(status__in=sorted(INCOMPLETE))
        .select_related("agent")
        .order_by("created_at")
        .first()
    )


def recent_activity(user: Person, mode: str | None, latest: int) -> list[EffectEvent]:
    """The `latest` lookups and moves of the machines themselves, newest first
    (event_recovery_idx)."""
    events = EffectEvent.objects.filter(
        Q(kind=EventKind.RECONCILIATION) | Q(actor__startswith="system:"),
        Q(effect__agent__mode=mode) if mode else Q(),
    )
    return list(visible_effects(user, events, "effect__").order_by("-id")[:latest])
