"""The crash test's verdict: three sources compared, every difference named.

- the provider: every charge it holds (its own `/_sandbox/transactions`);
- the ledger: every effect of the run, its status and provider reference, open review items;
- the expected business outcome: each workflow charges its account exactly once, its amount.

A **duplicate** is a workflow whose account was charged more than once. An **unexplained**
outcome is anything else that does not add up: a confirmed effect without its charge, a
charge whose effect is not confirmed and not waiting for a person, a provider reference that
is not the charge, a wrong amount. An effect left for review is explained (a person will
decide), and is listed with its reason; where the provider's record lets the machine settle
everything (a complete lookup, statements), the run is `machine_only` and any review item left
for people fails it. The verdict also counts the effects a machine settled, by lookup or by
statement, and the review items it closed.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any


@dataclass
class Verdict:
    workflows: int
    provider_transactions: int
    crashes_by_point: dict[str, int]
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    unexplained: list[dict[str, Any]] = field(default_factory=list)
    left_for_review: dict[str, int] = field(default_factory=dict)
    confirmed: int = 0
    recovery_latency: dict[str, float] = field(default_factory=dict)
    # Requests each web instance answered and jobs each rq worker finished ("web0": 412).
    served: dict[str, int] = field(default_factory=dict)
    # Every open review item of the run, whatever its effect; in a machine_only run, must be 0.
    open_review_items: int = 0
    machine_only: bool = False
    # Effects a machine moved out of doubt ("lookup": 40, "statement": 12), and review items
    # it closed on the way.
    settled_by_machine: dict[str, int] = field(default_factory=dict)
    reviews_closed_by_machine: int = 0
    # The statements imported (period, lines), in order.
    statements: list[dict[str, Any]] = field(default_factory=list)
    # Tail checks of effects sent again on a proof of absence, by what they found ("clean": 9).
    tail_checks: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        left_for_people = self.machine_only and self.open_review_items > 0
        return not self.duplicates and not self.unexplained and not left_for_people

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["crashes"] = sum(self.crashes_by_point.values())
        data["ok"] = self.ok
        return data

    def table(self) -> str:
        rows = [
            ("workflows", self.workflows),
            ("crashes injected", sum(self.crashes_by_point.values())),
            *((f"  at {point}", n) for point, n in sorted(self.crashes_by_point.items())),
            ("provider transactions", self.provider_transactions),
            ("effects confirmed", self.confirmed),
            ("duplicates (must be 0)", len(self.duplicates)),
            ("unexplained outcomes (must be 0)", len(self.unexplained)),
            ("left for review", sum(self.left_for_review.values())),
            *((f"  {reason}", n) for reason, n in sorted(self.left_for_review.items())),
            (
                "open review items" + (" (must be 0)" if self.machine_only else ""),
                self.open_review_items,
            ),
            ("settled by machine", sum(self.settled_by_machine.values())),
            *((f"  by {how}", n) for how, n in sorted(self.settled_by_machine.items())),
            ("review items closed by machine", self.reviews_closed_by_machine),
            # Shown where the run waits for them (a provider searched by lookups).
            *([("tail checks", sum(self.tail_checks.values()))] if self.tail_checks else []),
            *((f"  {found}", n) for found, n in sorted(self.tail_checks.items())),
            *(
                (
                    f"statement {n}",
                    f"{s['lines']} lines, {_clock(s['period_start'])} … {_clock(s['period_end'])}",
                )
                for n, s in enumerate(self.statements, 1)
            ),
            *(
                (f"recovery latency {name}", f"{value:.2f} s")
                for name, value in self.recovery_latency.items()
            ),
            *((f"served by {name}", n) for name, n in sorted(self.served.items())),
        ]
        width = max(len(str(label)) for label, _ in rows)
        return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _clock(iso: str) -> str:
    """A period boundary in the table: its time of day to the millisecond, UTC."""
    return f"{iso[11:23]} UTC"


def latency_summary(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {}
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def compare(
    workflows: list[dict[str, Any]],
    charges: list[dict[str, Any]],
    effects: list[dict[str, Any]],
    reviews: dict[str, str],
    crashes_by_point: dict[str, int],
    latencies: list[float],
    *,
    machine_only: bool = False,
) -> Verdict:
    """`workflows`: run_id, account, amount. `charges`: the provider's charges (id, account,
    amount). `effects`: the ledger's (id, run_id, status, provider_ref). `reviews`: effect id →
    reason of its open review item, for every open item of the run. `machine_only`: no item
    may be left for people."""
    verdict = Verdict(
        workflows=len(workflows),
        provider_transactions=len(charges),
        crashes_by_point=dict(crashes_by_point),
        recovery_latency=latency_summary(latencies),
        open_review_items=len(reviews),
        machine_only=machine_only,
    )
    # Accounts are one per workflow, so a charge belongs to a workflow even when the provider
    # ignored (and so did not keep) the idempotency key.
    charges_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for charge in charges:
        charges_of[str(charge.get("account"))].append(charge)
    effect_of = {e["run_id"]: e for e in effects}
    review_reasons: Counter[str] = Counter()
    for workflow in workflows:
        effect = effect_of.get(workflow["run_id"])
        reason = reviews.get(str(effect["id"])) if effect else None
        left = _judge(verdict, workflow, charges_of.pop(workflow["account"], []), effect, reason)
        if left:
            review_reasons[left] += 1
    for account, strays in charges_of.items():
        verdict.unexplained.append(
            {
                "account": account,
                "why": "charge of no workflow",
                "charges": [c["id"] for c in strays],
            }
        )
    verdict.left_for_review = dict(review_reasons)
    return verdict


def _judge(
    verdict: Verdict,
    workflow: dict[str, Any],
    mine: list[dict[str, Any]],
    effect: dict[str, Any] | None,
    reason: str | None,
) -> str | None:
    """One workflow against its charges at the provider (`mine`), its effect in the ledger and
    the reason of the effect's open review item, if any. Returns that reason when the workflow
    is left for review."""
    run_id = workflow["run_id"]
    status = effect["status"] if effect else "missing"
    if len(mine) > 1:
        verdict.duplicates.append(
            {"run_id": run_id, "charges": [c["id"] for c in mine], "status": status}
        )
    elif status == "confirmed":
        verdict.confirmed += 1
        if not mine:
            verdict.unexplained.append({"run_id": run_id, "why": "confirmed, no charge"})
        elif effect["provider_ref"] != mine[0]["id"]:
            verdict.unexplained.append(
                {
                    "run_id": run_id,
                    "why": "provider_ref is not the charge",
                    "provider_ref": effect["provider_ref"],
                    "charge": mine[0]["id"],
                }
            )
        elif Decimal(str(mine[0]["amount"])) != Decimal(str(workflow["amount"])):
            verdict.unexplained.append({"run_id": run_id, "why": "wrong amount"})
    elif reason:
        return reason
    elif mine:
        why = f"charged, but the effect is {status}"
        verdict.unexplained.append({"run_id": run_id, "why": why})
    elif status != "failed":
        verdict.unexplained.append({"run_id": run_id, "why": f"not charged, effect {status}"})
    return None


def compare_counts(
    workflows: list[dict[str, Any]],
    counts: dict[str, int],
    effects: list[dict[str, Any]],
    reviews: dict[str, str],
    crashes_by_point: dict[str, int],
    latencies: list[float],
    *,
    machine_only: bool = False,
) -> Verdict:
    """As `compare`, for a real provider's fake that counts its records per idempotency key
    (`counts`) rather than listing charges: each workflow's effect must have exactly one record
    when confirmed, none when failed, and one or none when it waits for a person; a record
    under a key of no effect is unexplained."""
    verdict = Verdict(
        workflows=len(workflows),
        provider_transactions=sum(counts.values()),
        crashes_by_point=dict(crashes_by_point),
        recovery_latency=latency_summary(latencies),
        open_review_items=len(reviews),
        machine_only=machine_only,
    )
    left = dict(counts)
    effect_of = {e["run_id"]: e for e in effects}
    review_reasons: Counter[str] = Counter()
    for workflow in workflows:
        run_id = workflow["run_id"]
        effect = effect_of.get(run_id)
        status = effect["status"] if effect else "missing"
        sent = left.pop(effect["idempotency_key"], 0) if effect else 0
        reason = reviews.get(str(effect["id"])) if effect else None
        if sent > 1:
            verdict.duplicates.append({"run_id": run_id, "records": sent, "status": status})
        elif status == "confirmed":
            verdict.confirmed += 1
            if not sent:
                verdict.unexplained.append({"run_id": run_id, "why": "confirmed, no record"})
        elif reason:
            review_reasons[reason] += 1
        elif sent:
            verdict.unexplained.append(
                {"run_id": run_id, "why": f"sent, but the effect is {status}"}
            )
        elif status != "failed":
            verdict.unexplained.append({"run_id": run_id, "why": f"not sent, effect {status}"})
    for key, n in left.items():
        verdict.unexplained.append({"key": key, "why": "record of no workflow", "records": n})
    verdict.left_for_review = dict(review_reasons)
    return verdict
