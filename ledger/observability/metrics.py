"""Prometheus metrics: counters bumped where things happen, gauges from a periodic summary.

Counters (`ledger_transitions_total`, `ledger_reconciliations_total`) are incremented in memory
when the transaction that did the thing commits, never by a query; a limit's refusal
(`ledger_limit_refusals_total`) when the database refuses the claim, as its transaction rolls
back; the agent API's latency histogram (`ledger.observability.apimetrics`) once per call.
Under gunicorn every worker (and the rq worker and django-q cluster, which share the
directory) writes its counters to files in `PROMETHEUS_MULTIPROC_DIR` (prometheus_client's
multiprocess mode), and a scrape, whichever worker answers it, adds up all of them. Without
that variable (tests, one process) the counters live in this process only. The gauges come
from `ledger.overview.summary`, and `/metrics` is served by `ledger.overview.scrape`.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from functools import partial

from django.db import transaction
from prometheus_client import CollectorRegistry, Counter

from ledger.models import Tool
from ledger.observability.apimetrics import API_CALLS
from ledger.policy import configversion
from ledger.policy.configversion import VersionedCache

MULTIPROCESS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

# This process's own counters (in multiprocess mode they are also written to the shared files,
# and the scrape reads those instead).
LOCAL_REGISTRY = CollectorRegistry()

TRANSITIONS = Counter(
    "ledger_transitions",
    "Committed status transitions of effects.",
    ["from_status", "to_status"],
    registry=LOCAL_REGISTRY,
)
RECONCILIATIONS = Counter(
    "ledger_reconciliations",
    "Reconciliation checks recorded, by tool and what the provider answered "
    "(found, not_found, inconclusive; no_lookup when nobody could be asked).",
    ["tool", "outcome"],
    registry=LOCAL_REGISTRY,
)
LIMIT_REFUSALS = Counter(
    "ledger_limit_refusals",
    "Claims refused by a limit, by the limit's scope (tool, agent) and kind "
    "(claims_per_minute, amount_per_day).",
    ["scope", "kind"],
    registry=LOCAL_REGISTRY,
)
LOCAL_REGISTRY.register(API_CALLS)


def count_transition(from_status: str, to_status: str) -> None:
    """Count a transition once its transaction commits: one rolled back never happened."""
    transaction.on_commit(partial(TRANSITIONS.labels(str(from_status), str(to_status)).inc))


# The declared tools' names, read again when the configuration version moves (a tool declared
# or removed): counters label every other tool summary.UNDECLARED.
_declared: VersionedCache[frozenset[str]] = VersionedCache()


def declared_tools() -> frozenset[str]:
    version = configversion.current()
    names = _declared.get("tools", version)
    if names is None:
        names = frozenset(Tool.objects.values_list("name", flat=True))
        _declared.put("tools", version, names)
    return names


def count_reconciliation(tool: str, outcome: str) -> None:
    counter = RECONCILIATIONS.labels(tool_label(tool, declared_tools()), outcome)
    transaction.on_commit(partial(counter.inc))


def count_limit_refusal(scope: str, kind: str) -> None:
    """Count a claim a limit refused, now: the refusal rolls its transaction back, so waiting
    for a commit would never count it."""
    LIMIT_REFUSALS.labels(scope, kind).inc()


# The one `tool` label value of every tool nobody declared (no `Tool` row). Agents name tools
# freely: a series per name would let any agent grow /metrics, and the memory behind every
# scrape, without bound.
UNDECLARED = "undeclared"


def tool_label(tool: str, declared: Collection[str]) -> str:
    return tool if tool in declared else UNDECLARED
