"""What the provider has said about effects, as the decisions and their suggestions read it.

Two events matter to an operator's choice: the latest lookup at the provider (a reconciliation
event: found, not found, duplicate, inconclusive) and the latest event that carries the
provider's own record of the effect (`data["record"]`: a lookup's answer, or a webhook held for
review). Both are read for many effects at once, one query each, so that a queue page of any
length costs the same (`reviews.decisions.suggest.suggest_for_rows`); the effect page, which
reads all of one effect's events anyway, picks them from those (`evidence_in`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.models import EffectEvent, EventKind

FOUND, NOT_FOUND, DUPLICATE = "found", "not_found", "duplicate"
# Provider statuses of a record that mean nothing was done (as the lookups normalise them).
FAILED_STATUSES = frozenset({"failed", "declined", "canceled", "cancelled"})


@dataclass(frozen=True)
class Evidence:
    """The latest lookup and the latest provider record of one effect (None when none)."""

    lookup: EffectEvent | None = None
    record: EffectEvent | None = None

    @property
    def lookup_outcome(self) -> str:
        return self.lookup.reason if self.lookup is not None else ""

    @property
    def found_ref(self) -> str:
        """The provider reference a lookup found ("" unless the latest lookup found one)."""
        if self.lookup_outcome not in (FOUND, DUPLICATE):
            return ""
        return str(_data(self.lookup).get("provider_ref") or "")

    @property
    def record_data(self) -> dict[str, Any]:
        return _data(self.record)

    @property
    def record_status(self) -> str:
        """The provider's status of its record; a webhook is held for review only when it
        reports the effect done, so its record says confirmed."""
        data = self.record_data
        return str(data.get("status") or ("confirmed" if data.get("webhook") else ""))

    @property
    def record_ref(self) -> str:
        data = self.record_data
        record = data.get("record") if isinstance(data.get("record"), dict) else {}
        return str(data.get("provider_ref") or record.get("id") or "")


def _data(event: EffectEvent | None) -> dict[str, Any]:
    return event.data if event is not None and isinstance(event.data, dict) else {}


def carries_record(event: EffectEvent) -> bool:
    """Whether the event carries the provider's own record of the effect (`data["record"]`)."""
    return isinstance(event.data, dict) and "record" in event.data


def evidence_in(events: Sequence[EffectEvent]) -> Evidence:
    """One effect's evidence picked from its events, read already in the order they happened:
    the latest lookup and the latest event that carries a record, as `evidence_for` reads them
    from the database."""
    return Evidence(
        lookup=next((e for e in reversed(events) if e.kind == EventKind.RECONCILIATION), None),
        record=next((e for e in reversed(events) if carries_record(e)), None),
    )


def evidence_for(effect_ids: Iterable[Any]) -> dict[Any, Evidence]:
    """Each effect's evidence, in two queries whatever the number of effects (DISTINCT ON over
    event_timeline_idx: the latest matching event per effect)."""
    ids = list(effect_ids)
    if not ids:
        return {}
    events = EffectEvent.objects.filter(effect_id__in=ids).order_by("effect_id", "-id")
    lookups = {
        e.effect_id: e for e in events.filter(kind=EventKind.RECONCILIATION).distinct("effect_id")
    }
    records = {e.effect_id: e for e in events.filter(data__has_key="record").distinct("effect_id")}
    return {i: Evidence(lookup=lookups.get(i), record=records.get(i)) for i in ids}


def evidence_of(effect_id: Any) -> Evidence:
    return evidence_for([effect_id])[effect_id]


def provider_refs(effect: Any, events: Iterable[EffectEvent]) -> list[tuple[str, str]]:
    """Every provider reference the evidence names, once each, with where it was first seen:
    a duplicate is two references for one effect, and the operator compares them."""
    found: dict[str, str] = {}

    def add(ref: Any, where: str) -> None:
        if isinstance(ref, str) and ref and ref not in found:
            found[ref] = where

    add(effect.provider_ref, "recorded on the effect")
    for event in events:
        data = _data(event)
        where = f"event {event.id} ({event.kind}, {event.actor})"
        refs = data.get("refs")
        for ref in refs if isinstance(refs, list) else []:
            add(ref, where)
        add(data.get("provider_ref"), where)
        add(data.get("recorded_ref"), f"{where}, as recorded")
    return list(found.items())
