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


# Inside the ledger, bottom first (docs/adr/0021-floors-inside-the-ledger.md). A part of the
# ledger (a subpackage, or a module at its top) imports only parts of floors below its own, and
# parts that share a floor do not import each other.
LEDGER_FLOORS = [
    ["errors", "jsonenc"],  # the ledger's errors and its one JSON encoding
    ["models", "sql"],  # the record: tables, states and transitions, the SQL rules
    ["policy"],  # what is declared and who may act: tools, money, keys, digests, redaction
    ["observability"],  # counters, logs, tracing, readiness
    ["rules"],  # what a move consults, and what it writes beside itself (events, reviews)
    ["effects"],  # the moves
    ["overview"],  # the ledger as a whole: the summary, /metrics
    ["audit"],  # the trail: sealing, exports, archive, retention, the witness
    ["containment"],  # acts on controls: halting, keys, duplicates
    ["statements"],  # applying a provider's statements
    ["restore"],  # restore mode
    ["api", "management", "admin", "apps", "tasks"],  # the doors
]


def ledger_part(path: Path, root: Path) -> str:
    """The part of the ledger a file belongs to: its subpackage, or its module's name."""
    relative = path.relative_to(root / "ledger")
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def ledger_floor_problems(root: Path = ROOT) -> list[str]:
    floor = {part: n for n, parts in enumerate(LEDGER_FLOORS) for part in parts}
    problems = []
    for path in sorted((root / "ledger").rglob("*.py")):
        if "migrations" in path.parts or path == root / "ledger" / "__init__.py":
            continue
        part = ledger_part(path, root)
        if part not in floor:
            problems.append(f"{path.relative_to(root)} is on no floor")
            continue
        for line, module in imported_modules(path.read_text()):
            names = module.split(".")
            if names[0] != "ledger" or len(names) < 2 or names[1] == part:
                continue
            other = names[1]
            if other not in floor:
                problems.append(f"{path.relative_to(root)}:{line} imports {module}, on no floor")
            elif floor[other] >= floor[part]:
                problems.append(f"{path.relative_to(root)}:{line} imports {module}")
    return problems


def test_no_part_of_the_ledger_imports_a_floor_above_or_beside_its_own():
    assert ledger_floor_problems() == []


def test_the_ledger_walk_finds_an_import_up_or_sideways(tmp_path):
    for part in ("models", "rules", "effects", "audit"):
        (tmp_path / "ledger" / part).mkdir(parents=True)
    (tmp_path / "ledger" / "models" / "states.py").write_text("from ledger.errors import X\n")
    (tmp_path / "ledger" / "rules" / "late.py").write_text(
        "def f():\n    from ledger.effects.transitions import claim\n"
    )
    (tmp_path / "ledger" / "effects" / "moves.py").write_text("from ledger.rules import halts\n")
    (tmp_path / "ledger" / "api.py").write_text("from ledger.effects import moves\n")
    (tmp_path / "ledger" / "stray.py").write_text("")
    (tmp_path / "ledger" / "sql").mkdir()
    (tmp_path / "ledger" / "sql" / "load.py").write_text("from ledger.models import Effect\n")
    assert ledger_floor_problems(tmp_path) == [
        "ledger/rules/late.py:2 imports ledger.effects.transitions",
        "ledger/sql/load.py:1 imports ledger.models",
        "ledger/stray.py is on no floor",
    ]


def only_reexports(source: str) -> bool:
    """A module whose body, besides its docstring, is imports and `__all__` only."""
    body = [
        node
        for node in ast.parse(source).body
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
    ]
    if not any(isinstance(node, ast.Import | ast.ImportFrom) for node in body):
        return False
    return all(
        isinstance(node, ast.Import | ast.ImportFrom)
        or (
            isinstance(node, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        )
        for node in body
    )


@pytest.mark.parametrize("app", [*FLOORS, "config"])
def test_no_module_only_re_exports(app):
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
        # Django finds an app's models in its `models` module: that package's door gathers them.
        and path.relative_to(ROOT / app).parts[-2:] != ("models", "__init__.py")
        and only_reexports(path.read_text())
    ]
    assert found == []


def test_a_module_of_imports_and_all_is_a_re_export():
    assert only_reexports('"""Old path."""\nfrom a import b\n__all__ = ["b"]\n')
    assert not only_reexports('"""A package."""\n')
    assert not only_reexports("from a import b\n\ndef f():\n    return b\n")
