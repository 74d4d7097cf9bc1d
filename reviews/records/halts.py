"""The halts as the halts page shows them: the active ones and the latest resumed, each with
whose agents it covers, without the halts of other teams' tools, agents and narrowed runs
(ADR 0014); and one halt by its number."""

from __future__ import annotations

from ledger.models import Halt
from ledger.rules.halts import active_halts, whose
from reviews.access.counts import visible_halts
from reviews.access.teams import Person

RESUMED_SHOWN = 20


def _with_whose(halts: list[Halt]) -> list[Halt]:
    for one in halts:
        one.whose = whose(one)  # type: ignore[attr-defined]
    return halts


def active(user: Person) -> list[Halt]:
    """The active halts the person is shown, oldest first."""
    return _with_whose(visible_halts(user, active_halts()))


def resumed(user: Person) -> list[Halt]:
    """The halts resumed most recently, of the `RESUMED_SHOWN` latest, that the person is shown."""
    latest = Halt.objects.filter(resumed_at__isnull=False).order_by("-resumed_at")[:RESUMED_SHOWN]
    return _with_whose(visible_halts(user, list(latest)))


def halt_numbered(halt_id: int) -> Halt | None:
    """The halt with this number, active or resumed; None when there is none."""
    return Halt.objects.filter(pk=halt_id).first()
