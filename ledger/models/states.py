"""The effect state machine as data: the states, and which (from, to) pairs are allowed.

`ledger.effects.transitions` performs transitions by this table, and the PostgreSQL trigger on the
effect table is generated from the same table (see `Effect.Meta.triggers`), so the database
refuses any status change the Python code would refuse.
"""

from __future__ import annotations

from django.db import models


class Status(models.TextChoices):
    PLANNED = "planned"
    DISPATCHING = "dispatching"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    COMPENSATED = "compensated"
    CANCELLED = "cancelled"
    # Above its tool's `approve_above`: waits for a second operator (`reviews.decisions`).
    AWAITING_APPROVAL = "awaiting_approval"


class Kind(models.TextChoices):
    ACTION = "action"
    COMPENSATION = "compensation"
    DECISION = "decision"


P, D, A = Status.PLANNED, Status.DISPATCHING, Status.AWAITING_CONFIRMATION
C, F, U = Status.CONFIRMED, Status.FAILED, Status.UNKNOWN
X, K = Status.COMPENSATED, Status.CANCELLED
W = Status.AWAITING_APPROVAL

TRANSITIONS: frozenset[tuple[Status, Status]] = frozenset(
    {
        (P, D),  # an owner claims it; `attempt` increments here and only here
        (P, K),  # the agent or an operator cancels it, or its upstream ended badly
        (P, U),  # restore mode: its claim may be among what the database lost
        (D, C),  # the lease holder reports an outcome ...
        (D, F),
        (D, U),
        (D, A),
        (D, P),  # ... or declares it was not sent; or recovery proves non-receipt
        (A, C),  # webhook, poll or reconciliation
        (A, F),
        (A, U),  # no confirmation within the tool's confirm_within
        (U, C),  # reconciliation with evidence, or an operator decision
        (U, F),
        (U, P),  # an operator's retry or a proof of non-receipt, within the attempt cap
        (C, X),  # its compensation effect was confirmed
        (W, P),  # a second operator approves it (four-eyes) ...
        (W, K),  # ... or rejects it; or its upstream ended badly
        (W, U),  # restore mode: its approval, and what followed, may have been lost
    }
)

# Statuses an effect can still leave by itself or by recovery.
INCOMPLETE = frozenset({P, D, A, U, W})
# Statuses in which nobody may have reported how the effect ended: the reconciliation checker
# looks at these (a dispatching one only once its lease has run out).
CHECKED = frozenset({D, A, U})
# Statuses whose dependents the upstream-failed cascade cancels: not dispatched yet.
CANCELLABLE = frozenset({P, W})
# Statuses from which nothing but compensation follows.
TERMINAL = frozenset({C, F, X, K})
# An upstream effect in one of these can never become confirmed (again): its planned
# dependents are cancelled with reason `upstream_failed`.
UPSTREAM_DEAD = frozenset({F, K, X})
# Outcome statuses a lease holder may report, mapped to the status they lead to.
OUTCOME_TARGETS: dict[str, Status] = {
    "confirmed": C,
    "failed": F,
    "unknown": U,
    "awaiting_confirmation": A,
    "not_sent": P,
}


def sql_list(statuses: frozenset[Status] | tuple[Status, ...]) -> str:
    """Statuses as a SQL list of literals, for raw SQL (`status IN (...)`). The values are this
    module's own constants, never input, so inlining them is safe and lets the planner match
    the partial indexes whose conditions name the same literals."""
    return ", ".join(f"'{s.value}'" for s in sorted(statuses))


def is_allowed(from_status: str, to_status: str) -> bool:
    return (Status(from_status), Status(to_status)) in TRANSITIONS
