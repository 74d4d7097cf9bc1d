"""Which adapter serves a tool: the tool's `reconciler` names one, its `reconciler_config`
configures it. This module imports the adapters; they import only the base (`adapters`)."""

from __future__ import annotations

from typing import Any

from ledger.models import Tool
from reconcilers.adapters import Adapter, Manual
from reconcilers.http_lookup import HttpLookup
from reconcilers.payments import SandboxPayments

ADAPTERS: dict[str, type] = {
    SandboxPayments.name: SandboxPayments,
    HttpLookup.name: HttpLookup,
    Manual.name: Manual,
}
# Adapters that can carry out an effect themselves (`execute`): the ledger's own compensations.
EXECUTING = frozenset(name for name, adapter in ADAPTERS.items() if hasattr(adapter, "execute"))


def adapter_for(tool: Tool | None) -> Adapter:
    """The adapter a tool's `reconciler` names, configured by its `reconciler_config`; a tool
    with none, or with a name nobody knows, gets `Manual` (a person decides)."""
    if tool is None or tool.reconciler not in ADAPTERS:
        return Manual()
    return ADAPTERS[tool.reconciler](config=dict(tool.reconciler_config or {}))


def executes(reconciler: str) -> bool:
    """Can the adapter of this name carry out effects itself?"""
    return reconciler in EXECUTING


def check_tool(name: str, fields: dict[str, Any]) -> str:
    """What `loadtools` must refuse about a tool's adapter
    (`ledger.policy.toolfile.ADAPTER_CHECKS`):
    a lookup that proves absence must answer with lists (a 404 or a single object proves
    nothing), and fetched statements need an adapter that can fetch them."""
    adapter = ADAPTERS.get(fields.get("reconciler") or "")
    config = dict(fields.get("reconciler_config") or {})
    if fields.get("lookup_proves_absence"):
        answers_with_lists = getattr(adapter, "answers_with_lists", None)
        if answers_with_lists is None or not answers_with_lists(config):
            return (
                "lookup_proves_absence needs a reconciler whose lookup answers with lists "
                f"(not {fields.get('reconciler') or 'none'!r} as configured)"
            )
    if fields.get("fetch_statements") and not hasattr(adapter, "fetch_statement"):
        return "fetch_statements needs a reconciler that can fetch statements"
    return ""
