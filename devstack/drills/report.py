"""A drill's counts and the checks that failed, printed as a table and kept as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DrillReport:
    drill: str
    counts: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def expect(self, label: str, ok: bool, detail: str = "") -> None:
        """Record a failed check; the drill goes on, so that every count is reported."""
        if not ok:
            self.failures.append(f"{label}{f' ({detail})' if detail else ''}")

    def expect_count(self, name: str, expected: int) -> None:
        actual = self.counts.get(name)
        self.expect(f"{name}: {actual}, must be {expected}", actual == expected)

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        return {
            "drill": self.drill,
            "ok": self.ok,
            "counts": self.counts,
            "failures": self.failures,
        }

    def table(self) -> str:
        rows = [(name, value) for name, value in self.counts.items()]
        width = max((len(name) for name, _ in rows), default=0)
        lines = [f"== {self.drill}: {'ok' if self.ok else 'FAILED'}"]
        lines += [f"  {name:<{width}}  {value}" for name, value in rows]
        lines += [f"  ! {failure}" for failure in self.failures]
        return "\n".join(lines)
