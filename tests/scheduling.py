"""How `make test` shares the suite between its pytest-xdist workers (`-n 3 --dist loadfile`).

Each worker takes whole units: a test file, the whole of tests/browser/ (its Chromium, its
live server and its identity provider start once per worker that runs them, so they are kept
on one), or the crash test's runs (`CRASH_RUNS`, tests/test_crashtest*.py). Each of those
starts a dozen processes on two-second leases, and two at once on two cores starve each other:
beside the providers' run, the hundred crashes took 317 s instead of 88 s alone, and in one
full run stopped without a verdict, most likely at their own 540 s limit. On one worker they
run one after another.

Units are handed out longest first (`LONGEST`), then in xdist's order (most tests first), each
to the first worker that is free: the long ones start at once instead of being
the last thing a worker does while the others wait.

`LONGEST` lists the units that take half a minute or more, longest first, as measured
(docs/testing.md says how). A unit missing from it only starts later than it could; a name that
no longer exists fails tests/test_scheduling.py.
"""

from __future__ import annotations

from collections import OrderedDict
from fnmatch import fnmatch

import pytest
from xdist.scheduler import LoadScopeScheduling

BROWSER = "tests/browser"
CRASH_RUNS = "tests/test_crashtest*.py"

LONGEST = (
    CRASH_RUNS,
    "tests/browser",
    "tests/test_faultdrills.py",
    "tests/adapters/test_mcp_crashes.py",
    "tests/test_client_package.py",
    "tests/adapters/test_openai_agents_crashes.py",
    "tests/adapters/test_langgraph_crashes.py",
    "tests/test_access_matrix.py",
    "tests/test_migration_locks.py",
    "tests/adapters/test_pydantic_ai_crashes.py",
    "tests/test_schemathesis.py",
    "tests/providers/test_provider_crashes.py",
    "tests/adapters/test_openai_agents.py",
    "tests/test_rules.py",
    "tests/adapters/test_pydantic_ai.py",
    "tests/adapters/test_dbos_crashes.py",
    "tests/test_front_server.py",
    "tests/test_callback_targets.py",
    "tests/test_failover.py",
    "tests/test_docs.py",
    "tests/adapters/test_mcp.py",
)


def unit_of(nodeid: str) -> str:
    """The unit a test belongs to: tests/browser, the crash runs, or its file."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(f"{BROWSER}/"):
        return BROWSER
    return CRASH_RUNS if fnmatch(path, CRASH_RUNS) else path


def rank(unit: str) -> int:
    """Where `unit` starts: the listed ones by their place, the rest after them."""
    return LONGEST.index(unit) if unit in LONGEST else len(LONGEST)


class LongestFirst(LoadScopeScheduling):
    """xdist's scope scheduling with `unit_of` as the scope and the longest units first."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self._ranked = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:
        if not self._ranked:
            # A stable sort: the unlisted units keep xdist's order among themselves.
            self.workqueue = OrderedDict(sorted(self.workqueue.items(), key=lambda u: rank(u[0])))
            self._ranked = True
        super()._assign_work_unit(node)
