"""tests/scheduling.py: the units `make test` hands its workers, longest first."""

from __future__ import annotations

from collections import OrderedDict

from tests.helpers import ROOT
from tests.scheduling import BROWSER, CRASH_RUNS, LONGEST, LongestFirst, rank, unit_of


def test_every_listed_unit_exists():
    assert [unit for unit in LONGEST if not list(ROOT.glob(unit))] == []
    assert len(set(LONGEST)) == len(LONGEST)


def test_the_browser_tests_are_one_unit_the_crash_runs_another_and_every_other_file_its_own():
    assert unit_of("tests/browser/test_phone.py::test_x[chromium]") == BROWSER
    assert len(list(ROOT.glob(CRASH_RUNS))) >= 3
    for name in ("test_crashtest.py", "test_crashtest_providers.py", "test_crashtest_hosts.py"):
        assert unit_of(f"tests/{name}::test_run") == CRASH_RUNS
    assert unit_of("tests/test_flush.py::test_y") == "tests/test_flush.py"
    assert unit_of("tests/adapters/test_mcp.py::test_z[a::b]") == "tests/adapters/test_mcp.py"


def test_the_longest_units_are_handed_out_first():
    class Node:
        sent: list[list[int]]

        def __init__(self) -> None:
            self.sent = []

        def send_runtest_some(self, indexes: list[int]) -> None:
            self.sent.append(indexes)

    collection = [
        "tests/test_a.py::t1",
        "tests/test_a.py::t2",
        "tests/test_crashtest.py::t",
        "tests/browser/test_b.py::t",
        "tests/test_b.py::t",
    ]
    scheduler = LongestFirst.__new__(LongestFirst)
    scheduler._ranked = False
    scheduler.workqueue = OrderedDict()
    for nodeid in collection:
        scheduler.workqueue.setdefault(unit_of(nodeid), {})[nodeid] = False
    scheduler.assigned_work = {}
    node = Node()
    scheduler.registered_collections = {node: collection}
    for _ in range(4):
        scheduler._assign_work_unit(node)
    handed = [collection[indexes[0]] for indexes in node.sent]
    assert [unit_of(n) for n in handed] == [
        CRASH_RUNS,
        BROWSER,
        "tests/test_a.py",
        "tests/test_b.py",
    ]
    assert rank("tests/test_not_listed.py") == len(LONGEST)
