"""Restore mode's sweep of the lost window, every minute while the mode is on.

For each declared tool whose adapter, as configured, can list a time window
(`Backing.lists_windows`, `list_window`), the provider's records over the lost branch's reach
(`ledger.restore.gap.statement_bounds`: from `lost_since` less the longest lease to the mode's
start plus the longest lease and settle_after) are listed
once that range has passed, and `ledger.restore.gap.account_for` matches each to an effect or
opens an incident. Each minute, incidents of the window whose record an effect posted again now
names are closed (`ledger.restore.incidents`). A listing that
is not complete (a page missing, the provider down, even half-way through a listing streamed
page by page: nothing of it is kept) is tried again a minute later; each tool is
swept once per window. Which tools are due is recorded on the window first, so restore mode does
not end by itself before every one of them is swept.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from ledger.models import Tool
from ledger.restore import gap, incidents, mode
from reconcilers.providers import adapter_for
from reconcilers.providers.outcomes import ListingBroken

log = logging.getLogger(__name__)


def _lists(adapter: Any, tool: Tool) -> bool:
    """Whether the tool's adapter, as configured, can list a window (`Backing.lists_windows`)."""
    return adapter.backing(dict(tool.reconciler_config or {})).lists_windows


def run() -> dict[str, Any]:
    window = mode.current()
    if window is None:
        return {}
    listing_tools = {
        tool.name: (tool, adapter)
        for tool in Tool.objects.order_by("name")
        if _lists(adapter := adapter_for(tool), tool)
    }
    gap.sweeps_due(window, list(listing_tools))
    done: dict[str, Any] = {}
    for name in gap.unswept(mode.current() or window):
        tool, adapter = listing_tools[name]
        # Every moment a copy sent on the lost branch could have reached the provider: not
        # before that range has passed, or a late send would be missed.
        start, end = gap.statement_bounds(window, tool)
        if timezone.now() < end:
            done[name] = {"waiting until": end.isoformat()}
            continue
        listing = adapter.list_window(start, end)
        try:
            if listing.complete:
                done[name] = gap.account_for(window, tool, start, end, listing.records)
                log.warning("restore sweep of %s: %s", name, done[name])
                continue
            broken = listing.detail
        except ListingBroken as exc:  # a streamed listing short of a page: nothing was kept
            broken = str(exc)
        log.warning("restore sweep of %s: %s; trying again in a minute", name, broken)
        done[name] = {"incomplete": broken}
    if closed := incidents.close_explained(window):
        done["incidents closed"] = closed
    return done
