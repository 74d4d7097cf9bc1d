"""The pages' views query nothing themselves: they parse the request, call a read function
beside its domain (`reviews.records`, `reviews.queue`, `reviews.decisions.waiting`) or a
service, and render. Every module under reviews/views/ is walked for what queries the database
through the ORM: a manager (`Model.objects`), a queryset's methods, `get_object_or_404`, a
model's own reads and writes, and the imports that build queries or reach the connection."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

VIEWS = ROOT / "reviews" / "views"

# Methods only a queryset (or a manager, a related manager, a model instance) has.
ORM_METHODS = frozenset(
    {
        "filter",
        "exclude",
        "select_related",
        "prefetch_related",
        "annotate",
        "aggregate",
        "alias",
        "values_list",
        "order_by",
        "only",
        "defer",
        "distinct",
        "exists",
        "first",
        "last",
        "latest",
        "earliest",
        "in_bulk",
        "iterator",
        "none",
        "using",
        "raw",
        "extra",
        "dates",
        "datetimes",
        "select_for_update",
        "create",
        "get_or_create",
        "update_or_create",
        "bulk_create",
        "bulk_update",
        "refresh_from_db",
        "save",
    }
)
# Names a manager is reached by.
MANAGERS = frozenset({"objects", "_default_manager", "_base_manager"})
SHORTCUTS = frozenset({"get_object_or_404", "get_list_or_404"})
# Imports that build queries (Q, F, Count, Subquery, …) or reach the connection.
QUERY_MODULES = frozenset({"django.db.models", "django.db.models.functions"})
CONNECTION_NAMES = frozenset({"connection", "connections"})


def _ambiguous(name: str, call: ast.Call) -> bool:
    """Methods a dict, a str or a list has too, told apart by how they are called: a queryset's
    `get(pk=…)` takes keywords where a dict's takes a key; `count()` and `all()` and `delete()`
    take nothing where a str's `count` takes what to count; `values("id")` names columns where a
    dict's `values()` names none."""
    positional, keywords = bool(call.args), bool(call.keywords)
    if name == "get":
        return not positional
    if name in ("count", "all", "delete"):
        return not positional and not keywords
    if name == "values":
        return positional or keywords
    return False


def _call_problem(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in SHORTCUTS:
        return f"{name}()"
    if not isinstance(func, ast.Attribute) or name is None:
        return None
    if name in ORM_METHODS or _ambiguous(name, call):
        return f".{name}()"
    return None


def _import_problem(node: ast.AST) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.level == 0:
        if node.module in QUERY_MODULES:
            return f"imports from {node.module}"
        names = {alias.name for alias in node.names}
        if node.module == "django.db" and names & CONNECTION_NAMES:
            return "imports the database connection"
        if node.module == "django.shortcuts" and names & SHORTCUTS:
            return f"imports {', '.join(sorted(names & SHORTCUTS))}"
    if isinstance(node, ast.Import) and any(a.name in QUERY_MODULES for a in node.names):
        return "imports django.db.models"
    return None


def orm_queries(source: str) -> list[tuple[int, str]]:
    """Each line of `source` that queries through the ORM, with what it does."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        problem = None
        if isinstance(node, ast.Attribute) and node.attr in MANAGERS:
            problem = f".{node.attr}"
        elif isinstance(node, ast.Call):
            problem = _call_problem(node)
        else:
            problem = _import_problem(node)
        if problem is not None:
            found.add((node.lineno, problem))
    return sorted(found)


def queries_in_views(root: Path = VIEWS) -> list[str]:
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line} {what}"
        for path in sorted(root.rglob("*.py"))
        for line, what in orm_queries(path.read_text())
    ]


def test_no_view_queries_the_orm():
    assert queries_in_views() == []


CAUGHT = """\
from django.db.models import Q
from django.db import connection, transaction
from django.shortcuts import get_object_or_404, render
import django.db.models
effect = Effect.objects.get(pk=1)
effect = get_object_or_404(Effect, pk=1)
events = list(visible_effects(user, qs).filter(kind="intent"))
rows = items.exclude(resolved_at=None)
rows = items.select_related("agent")
rows = items.order_by("-id")[:15]
item = items.get(pk=3)
item = items.get()
n = items.count()
ids = items.values("id")
ids = items.values_list("id", flat=True)
first = items.first()
there = items.exists()
total = items.aggregate(n=Count("id"))
every = effect.children.all()
effect.save(update_fields=["status"])
effect.delete()
note = effect.notes.create(text="x")
manager = Effect._default_manager
"""

LOOK_ALIKES = """\
from django.db import transaction
from django.shortcuts import redirect, render
page = request.GET.get("page")
reason = exc.extra.get("fields", {}).items()
lines = shown.count("\\n")
total = sum(counts.values())
context.update(agent=agent, rows=rows)
both = names.union(others)
kept = [n for n in filter(None, names)]
halt = Halt(scope="tool", value="charge_card")
"""


def test_the_walker_catches_every_kind_of_query():
    caught = orm_queries(CAUGHT)
    assert sorted({line for line, _ in caught}) == list(range(1, CAUGHT.count("\n") + 1))
    assert (5, ".objects") in caught and (5, ".get()") in caught
    assert (6, "get_object_or_404()") in caught
    assert (3, "imports get_object_or_404") in caught


def test_the_walker_leaves_dicts_strings_and_forms_alone():
    assert orm_queries(LOOK_ALIKES) == []


def test_the_walk_covers_every_module_under_the_views(tmp_path):
    (tmp_path / "fine.py").write_text("def view(request):\n    return render(request, 'x')\n")
    (tmp_path / "deeper").mkdir()
    (tmp_path / "deeper" / "reads.py").write_text(
        "def view(request):\n    return Effect.objects.first()\n"
    )
    found = queries_in_views(tmp_path)
    assert [line.split(":", 1)[1] for line in found] == ["2 .first()", "2 .objects"]
