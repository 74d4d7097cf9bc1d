"""What `loadtools` refuses about a tool's adapter (`ledger.policy.toolfile.ADAPTER_CHECKS`):
an adapter nobody knows, a configuration the adapter finds wrong, a secret written into the
file, and any declaration the adapter cannot back (`base.Backing`), each named by its key."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from reconcilers.providers import names, provider_class
from reconcilers.providers.base import Backing

# Configuration keys that would hold a secret: only their `*_env` form (a variable's name).
_SECRET_WORDS = re.compile(r"(token|secret|password|api_?key|credential|authorization)", re.I)


def check_tool(name: str, fields: dict[str, Any]) -> str:
    """What is wrong with the tool's adapter as declared, or ""."""
    reconciler = fields.get("reconciler") or ""
    config = dict(fields.get("reconciler_config") or {})
    if not reconciler:
        if fields.get("lookup_proves_absence"):
            return "lookup_proves_absence needs a reconciler whose lookup answers with lists"
        if fields.get("fetch_statements"):
            return "fetch_statements needs a reconciler that can fetch statements"
        return ""
    adapter = provider_class(reconciler)
    if adapter is None:
        return f"reconciler {reconciler!r} is not a known adapter (known: {', '.join(names())})"
    for key in sorted(config):
        if _SECRET_WORDS.search(key) and not key.endswith("_env"):
            return (
                f"reconciler_config.{key}: a secret is never written here; name the "
                f"environment variable that holds it ({key}_env)"
            )
    problems = adapter.config_problems(config, str(fields.get("mode") or "live"))
    if problems:
        return f"reconciler_config: {'; '.join(problems)}"
    return beyond_backing(reconciler, adapter.backing(config), fields)


def beyond_backing(reconciler: str, backing: Backing, fields: dict[str, Any]) -> str:
    """The first declaration of the tool that the adapter, as configured, cannot back."""
    said = f"the {reconciler} adapter"
    if fields.get("honours_key") and backing.honours_key is False:
        return f"honours_key: {said} speaks to a provider that keeps no idempotency keys"
    ttl, most = fields.get("key_ttl"), backing.key_ttl
    if fields.get("honours_key") and ttl is not None and most is not None and ttl > most:
        return f"key_ttl: {_span(ttl)} is longer than the provider keeps keys ({_span(most)})"
    if fields.get("has_lookup") and not backing.lookup:
        return f"has_lookup: {said} cannot look an effect up"
    if fields.get("lookup_proves_absence") and not backing.proves_absence:
        return (
            f"lookup_proves_absence: {said}, as configured, cannot prove absence "
            "(its lookup does not answer with a complete list)"
        )
    lag = fields.get("search_lag") or timedelta(0)
    if fields.get("lookup_proves_absence") and lag < backing.search_lag:
        return (
            f"search_lag: {_span(lag)} is shorter than the provider's ({_span(backing.search_lag)})"
        )
    horizon = fields.get("lookup_horizon")
    if horizon is not None and backing.lookup_horizon and horizon > backing.lookup_horizon:
        return (
            f"lookup_horizon: {_span(horizon)} is further back than the provider's lookup sees "
            f"({_span(backing.lookup_horizon)})"
        )
    if fields.get("fetch_statements") and not backing.fetches_statements:
        return f"fetch_statements: {said}, as configured, cannot fetch statements"
    report = fields.get("statement_format") or ""
    if report and report != backing.report:
        shown = repr(backing.report) if backing.report else "none"
        return f"statement_format: {said} reads {shown}, not {report!r}"
    return ""


def _span(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
