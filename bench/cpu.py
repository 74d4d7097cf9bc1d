"""CPU time from /proc: of the machine, of every process, and split among the parties of a run.

Rates move with whatever else the machine is doing; CPU seconds per unit of work barely do, so
every benchmark reports them beside its rates.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_ticks() -> tuple[int, int]:
    """(all ticks, busy ticks) of all CPUs together, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return sum(values), sum(values) - values[3] - values[4]


def process_ticks() -> Iterator[tuple[int, str, int, int]]:
    """(pid, comm, process group, user + system ticks) of every process we can read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2 :].split()
        yield int(entry.name), comm, int(rest[2]), int(rest[11]) + int(rest[12])


def ticks_of(pid: int) -> int:
    """User + system ticks of one process."""
    raw = Path("/proc", str(pid), "stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def process_title(pid: int) -> str:
    """The command line, with spaces; for PostgreSQL the process title, which names the
    database of a backend ("postgres: 15/main: user db 127.0.0.1(5432) idle")."""
    return Path("/proc", str(pid), "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


class Process(NamedTuple):
    pid: int
    comm: str
    title: str
    pgrp: int


# Which party a process belongs to; the first party whose test passes takes it.
Parties = dict[str, Callable[[Process], bool]]


@dataclass
class CpuWindow:
    """CPU seconds per party between `start()` and `stop()`, plus "other" (every process no
    party claims) and "idle" (the unused rest of all cores). Outside Linux it stays empty."""

    parties: Parties
    before: dict[int, int] = field(default_factory=dict)
    machine_before: tuple[int, int] = (0, 0)
    seconds: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        try:
            self.before = {pid: ticks for pid, _, _, ticks in process_ticks()}
            self.machine_before = machine_ticks()
        except OSError:
            self.before = {}

    def stop(self) -> None:
        try:
            total, busy = machine_ticks()
        except OSError:
            return
        if not self.before or total <= self.machine_before[0]:
            return
        used = dict.fromkeys([*self.parties, "other", "idle"], 0)
        for pid, comm, pgrp, ticks in process_ticks():
            delta = ticks - self.before.get(pid, 0)
            if not delta:
                continue
            try:
                title = process_title(pid)
            except OSError:  # gone since: its ticks were counted, its name is lost
                title = comm
            process = Process(pid, comm, title, pgrp)
            party = next((p for p, test in self.parties.items() if test(process)), "other")
            used[party] += delta
        used["idle"] = (total - self.machine_before[0]) - (busy - self.machine_before[1])
        self.seconds = {k: v / CLOCK_TICKS for k, v in used.items()}
