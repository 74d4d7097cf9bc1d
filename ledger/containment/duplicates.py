"""A duplicate at the provider: it may hold one effect more than once.

Found by a lookup that lists two or more records under one reference, a webhook or late
outcome naming another provider reference for a settled effect, or a statement with two or
more successful charge lines for one effect. Wherever it is found, `report_duplicate` does
the same: an event on the effect with the evidence, a `duplicate` review item at high
severity (raising an open item to it), and, for a tool that declares `halt_on_duplicate`, a
halt of the tool's claims until a person has looked (`ledger.containment.halts`). An effect
with an
open duplicate item cannot be claimed (`ledger.effects.transitions.claim`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from ledger.containment.halts import halt
from ledger.models import EventKind, HaltScope, Reason, Tool
from ledger.rules.events import record_event
from ledger.rules.reviewqueue import open_review


def report_duplicate(
    effect_id: Any,
    tool: str,
    *,
    status: str,
    actor: str,
    kind: str = EventKind.RECONCILIATION,
    evidence: Mapping[str, Any],
    recorded: bool = False,
) -> None:
    """Record a duplicate of this effect (in `status` now) found by `actor`: the event
    (`kind`, with `evidence`: provider refs, lines; redacted by the caller), the review item,
    and the tool's halt where it declares `halt_on_duplicate`. In one transaction. `recorded`:
    the caller has recorded the evidence in an event of its own already."""
    with transaction.atomic():
        if not recorded:
            record_event(
                effect_id,
                kind=kind,
                actor=actor,
                from_status=status,
                to_status=status,
                reason=Reason.DUPLICATE.value,
                data={"duplicate": True, **evidence},
            )
        open_review(effect_id, Reason.DUPLICATE)
        if Tool.objects.filter(name=tool, halt_on_duplicate=True).exists():
            halt(
                HaltScope.TOOL,
                tool,
                reason=f"A duplicate was found at the provider for effect {effect_id}.",
                by=actor,
            )


def on_late_report(
    sender: Any, *, effect: Any, actor: str, evidence: Mapping[str, Any], **_: Any
) -> None:
    """`ledger.effects.outcomes.duplicate_found`: a late report named another provider reference;
    its event is recorded already, inside the same transaction."""
    report_duplicate(
        effect.id,
        effect.tool,
        status=effect.status,
        actor=actor,
        kind=EventKind.LATE_OUTCOME,
        evidence=evidence,
        recorded=True,
    )
