"""Wake-ups: telling whoever checks effects that some are due, after the write commits.

The ledger (`next_check_at`) is the queue of record; a wake-up is only a hint that saves waiting
for the next sweep. The ledger does not know who listens: `reconcilers` connects its job queue
to `checks_due` when it starts, so the core never imports the floors above it. With no
listener, or with Redis down, nothing is lost: the sweep re-drives what is due.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.dispatch import Signal

# Sent with `effect_ids` (a list of str) once the transaction that made them due has committed.
checks_due = Signal()


def wake(effect_ids: Iterable[Any]) -> None:
    """After the current transaction commits, ask a checker to look at these effects."""
    ids = [str(i) for i in effect_ids]
    if ids:
        # robust: a listener's failure is logged and never fails a request whose write committed.
        transaction.on_commit(lambda: checks_due.send(sender=None, effect_ids=ids), robust=True)
