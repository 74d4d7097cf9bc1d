"""The answer to "what is incomplete?" after a restart, and what each action asks of the caller.

- `retry_safe`: re-run the step — call `ledger.effect(...)` again with the same run, step,
  tool, target and request. The earlier attempt provably did not happen (or a repeat with the
  same idempotency key cannot duplicate it), so the claim starts a new attempt, same key.
- `reconcile`: nothing to do — the ledger asks the provider by idempotency key and records what
  it finds. Ask again later before re-running anything.
- `wait`: nothing yet — blocked on an upstream, held under a live lease, or awaiting the
  provider's confirmation.
- `review`: never re-run — nobody can tell whether it happened; an operator decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

Action = Literal["retry_safe", "reconcile", "review", "wait"]


class RecoveryItem(NamedTuple):
    effect: dict[str, Any]
    action: Action
    reason: str


@dataclass(frozen=True)
class RecoveryPlan:
    items: list[RecoveryItem]
    counts_by_status: dict[str, int] = field(default_factory=dict)

    def __iter__(self) -> Iterator[RecoveryItem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def with_action(self, action: Action) -> list[RecoveryItem]:
        return [item for item in self.items if item.action == action]

    @property
    def retry_safe(self) -> list[RecoveryItem]:
        return self.with_action("retry_safe")

    @property
    def needs_review(self) -> list[RecoveryItem]:
        return self.with_action("review")
