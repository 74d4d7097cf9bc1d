"""The apps stand in floors: ledger < reconcilers < reviews. No module imports a floor above
its own, at the top of the file or inside a function (migrations, which are history, aside)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

FLOORS = ["ledger", "reconcilers", "reviews"]


def imported_modules(source: str) -> list[tuple[int, str]]:
    """Every module a source imports, with the line that does it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def upward_imports(app: str, root: Path = ROOT) -> list[str]:
    above = FLOORS[FLOORS.index(app) + 1 :]
    problems = []
    for path in sorted((root / app).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for line, module in imported_modules(path.read_text()):
            if module.split(".")[0] in above:
                problems.append(f"{path.relative_to(root)}:{line} imports {module}")
    return problems


@pytest.mark.parametrize("app", FLOORS)
def test_no_app_imports_a_floor_above_its_own(app):
    assert upward_imports(app) == []


def test_the_walk_finds_an_upward_import_wherever_it_stands(tmp_path):
    (tmp_path / "ledger").mkdir()
    (tmp_path / "ledger" / "fine.py").write_text("from ledger.models import Effect\n")
    (tmp_path / "ledger" / "late.py").write_text(
        "def f():\n    from reviews.decisions import decide\n    import reconcilers.jobs\n"
    )
    (tmp_path / "ledger" / "migrations").mkdir()
    (tmp_path / "ledger" / "migrations" / "0001.py").write_text("import reviews\n")
    assert upward_imports("ledger", tmp_path) == [
        "ledger/late.py:2 imports reviews.decisions",
        "ledger/late.py:3 imports reconcilers.jobs",
    ]
    assert upward_imports("reviews", tmp_path) == []
