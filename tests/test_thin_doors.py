"""Thin doors: every route of the API (the agent API in `ledger/api/routes/`, and the callback
door in providers' own schemes) parses its request, calls one ledger function and shapes the
answer, in at most 15 lines from its `def` to its last line. The walk reads the sources of
every app; it is checked against the served OpenAPI document, so that a route the walk cannot
see, or a decorator it takes for a route, fails too."""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

from django.test import Client

from tests.helpers import ROOT

LONGEST = 15
APPS = ("ledger", "reconcilers", "reviews")
# django-ninja's route decorators, on an API or a router (`@router.post(...)`).
ROUTE_DECORATORS = frozenset({"get", "post", "put", "patch", "delete", "api_operation"})


@dataclass(frozen=True)
class Route:
    path: str
    name: str
    line: int
    lines: int
    operation_id: str | None


def _route_decorator(decorator: ast.expr) -> ast.Call | None:
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr in ROUTE_DECORATORS
    ):
        return decorator
    return None


def routes_in(source: str, path: str) -> list[Route]:
    """The route functions of one module: each function under a route decorator."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            call = _route_decorator(decorator)
            if call is None:
                continue
            named = [k.value for k in call.keywords if k.arg == "operation_id"]
            operation_id = named[0].value if named and isinstance(named[0], ast.Constant) else None
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            found.append(Route(path, node.name, node.lineno, lines, operation_id))
    return found


def all_routes(root: Path = ROOT) -> list[Route]:
    found = []
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" not in path.parts:
                found += routes_in(path.read_text(), str(path.relative_to(root)))
    return found


def too_long(routes: list[Route]) -> list[str]:
    return [
        f"{r.path}:{r.line} {r.name} is {r.lines} lines (at most {LONGEST})"
        for r in routes
        if r.lines > LONGEST
    ]


def test_no_route_is_longer_than_15_lines():
    assert too_long(all_routes()) == []


def test_the_walk_finds_every_operation_the_api_serves_and_nothing_else():
    schema = Client().get("/api/v1/openapi.json").json()
    served = [op["operationId"] for path in schema["paths"].values() for op in path.values()]
    walked = [route.operation_id for route in all_routes()]
    assert sorted(walked, key=str) == sorted(served)


LONG_ROUTE = "\n".join(f"    step_{n} = {n}" for n in range(14))
MODULE = f"""
import functools

@router.post("/long", operation_id="long")
def long_route(request):
{LONG_ROUTE}
    return step_0


@api.get("/short", operation_id="short")
def short_route(request):
{LONG_ROUTE}


@api.exception_handler(ValueError)
def handler(request, exc):
{LONG_ROUTE}
{LONG_ROUTE}


@functools.cache
def helper():
{LONG_ROUTE}
{LONG_ROUTE}
"""


def test_the_walk_flags_a_long_route_and_no_other_function(tmp_path):
    (tmp_path / "reconcilers" / "door").mkdir(parents=True)
    (tmp_path / "reconcilers" / "door" / "routes.py").write_text(textwrap.dedent(MODULE))
    for app in ("ledger", "reviews"):
        (tmp_path / app).mkdir()
    routes = all_routes(tmp_path)
    assert [(r.name, r.lines, r.operation_id) for r in routes] == [
        ("long_route", 16, "long"),
        ("short_route", 15, "short"),
    ]
    assert too_long(routes) == ["reconcilers/door/routes.py:5 long_route is 16 lines (at most 15)"]
