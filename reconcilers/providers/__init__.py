"""Provider adapters, one package per provider: how the ledger asks a provider what it did.

A tool's `reconciler` names an adapter and its `reconciler_config` configures it. Each
provider lives in its own package here (`reconcilers/providers/<name>/`: the adapter, its
callback scheme, its report reader, its tests' fake): what it can back is declared by the
adapter (`base.Backing`), and `loadtools` refuses a tool that declares more, or names an
adapter nobody knows (`checks`).

Adapters can also come from an installed package: an entry point in the group
`effect_ledger.providers` whose name is the adapter's name and whose object is its class
(docs/providers/writing-an-adapter.md). A built-in name cannot be taken by a package.
"""

from __future__ import annotations

import importlib
import logging
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from ledger.models import Tool
from reconcilers.providers.base import Manual, Provider

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "effect_ledger.providers"
# The built-in adapters: name → the module that holds the class of that name (`ADAPTER`),
# imported when first used, so that a provider's SDK is loaded only where it is needed.
BUILT_IN = {
    "manual": "reconcilers.providers.base",
    "sandbox_payments": "reconcilers.providers.sandbox_payments",
    "http_lookup": "reconcilers.providers.http_lookup",
    "sendgrid": "reconcilers.providers.sendgrid",
    "github": "reconcilers.providers.github",
    "slack": "reconcilers.providers.slack",
    "stripe": "reconcilers.providers.stripe",
}


@cache
def _installed() -> dict[str, Any]:
    """The adapters installed packages declare (a built-in name is not theirs to take)."""
    found = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in BUILT_IN:
            log.warning("provider adapter %r from %s ignored: a built-in", point.name, point.value)
            continue
        found[point.name] = point
    return found


def names() -> list[str]:
    """Every adapter the ledger knows, built in or installed."""
    return sorted({*BUILT_IN, *_installed()})


@cache
def provider_class(name: str) -> type[Provider] | None:
    """The adapter class of this name, or None when nobody knows the name."""
    if name in BUILT_IN:
        module = importlib.import_module(BUILT_IN[name])
        return Manual if name == "manual" else module.ADAPTER
    point = _installed().get(name)
    return None if point is None else point.load()


def adapter_for(tool: Tool | None) -> Provider:
    """The adapter a tool's `reconciler` names, configured by its `reconciler_config` and
    mode; a tool with none gets `Manual` (a person decides), and so does one whose adapter is
    no longer known (`loadtools` refuses such a name; an older row may still hold one)."""
    if tool is None or not tool.reconciler:
        return Manual()
    adapter = provider_class(tool.reconciler)
    if adapter is None:
        log.error("tool %s names the unknown reconciler %r", tool.name, tool.reconciler)
        return Manual()
    return adapter(config=dict(tool.reconciler_config or {}), mode=tool.mode)


def executes(reconciler: str) -> bool:
    """Can the adapter of this name carry out effects itself?"""
    adapter = provider_class(reconciler) if reconciler else None
    return adapter is not None and hasattr(adapter, "execute")


def executing() -> list[str]:
    """The names of the adapters that carry out effects themselves."""
    return [name for name in names() if executes(name)]


def register_reports() -> None:
    """Make every adapter's report format known to the statement importer."""
    from ledger.statements.formats import register

    for name in names():
        try:
            adapter = provider_class(name)
        except Exception:
            # An installed package that fails to load must not stop the ledger: its tools
            # fall back to a person deciding, and the error is in the log.
            log.exception("provider adapter %r could not be loaded", name)
            continue
        if adapter is not None and adapter.report is not None:
            register(adapter.report)
