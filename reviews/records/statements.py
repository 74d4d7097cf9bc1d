"""The providers' statements as the pages show them: the imports so far, a page at a time; the
tools a person may import a statement for; statement lines with their amounts in major units."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator

from ledger.models import StatementImport, Tool
from ledger.policy.iso4217 import major_units
from reviews.access.teams import Person, visible_by_tool, visible_tools


def imports_page(user: Person, number: Any, per_page: int) -> Page:
    """Page `number` of the imports, newest first; imports for other teams' tools are not shown
    (ADR 0014)."""
    imports = visible_by_tool(user, StatementImport.objects.order_by("-created_at", "-id"))
    page = Paginator(imports, per_page).get_page(number)
    page.object_list = list(page.object_list)
    return page


def statement_tools(user: Person | None) -> list[str]:
    """The tools that declare statements, by name; with `user`, only those of their teams or of
    no team (ADR 0014)."""
    names = Tool.objects.filter(statements=True).order_by("name").values_list("name", flat=True)
    mine = visible_tools(user) if user is not None else None
    return [n for n in names if mine is None or n in mine]


def shown_lines(lines: Any) -> list[Any]:
    """Statement lines with their amount in major units, for the pages that list them."""
    lines = list(lines)
    for line in lines:
        line.amount = major_units(line.amount_minor, line.currency)
    return lines
