"""What every benchmark prints and writes: tables, percentiles, and the result file."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import ROOT


def print_grid(
    header: Sequence[str], rows: Sequence[Sequence[Any]], *, right_align: bool = False
) -> None:
    """A table: columns as wide as their widest cell, a rule under the header. The first column
    is aligned left; the others too, or right with `right_align`."""
    table = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for index, row in enumerate(table):
        cells = [row[0].ljust(widths[0])]
        cells += [
            c.rjust(w) if right_align else c.ljust(w)
            for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("  ".join(cells))
        if index == 0:
            print("  ".join("-" * w for w in widths))


def percentile(sorted_values: list[float], q: float) -> float:
    """The value at quantile `q` of an already sorted list (nearest rank)."""
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def machine_info() -> dict[str, Any]:
    """The machine a result was measured on."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_result(path: Path, data: dict[str, Any]) -> None:
    """`data` as JSON at `path` (under var/bench/), and a line saying where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"\nwritten to {path.relative_to(ROOT)}")
