"""Prometheus metrics: counters bumped where things happen, gauges from a periodic summary.

Counters (`ledger_transitions_total`, `ledger_reconciliations_total`) are incremented in memory
when the transaction that did the thing commits, never by a query; a limit's refusal
(`ledger_limit_refusals_total`) when the database refuses the claim, as its transaction rolls
back; the agent API's latency histogram (`ledger.observability.apimetrics`) once per call.
Under gunicorn every worker (and the rq worker and django-q cluster, which share the
directory) writes its counters to files in `PROMETHEUS_MULTIPROC_DIR` (prometheus_client's
multiprocess mode), and a scrape, whichever worker answers it, adds up all of them. Without
that variable (tests, one process) the counters live in this process only. The gauges come
from `ledger.observability.summary`.

Who may scrape: whoever sends `Authorization: Bearer <LEDGER_METRICS_TOKEN>`. Without the
setting `/metrics` does not exist (404): counts of effects by tool and status are business
data, and a forgotten open endpoint is worse than a missing one.
"""

from __future__ import annotations

import hmac
import os
from functools import partial

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from ledger.models import Tool
from ledger.observability.apimetrics import API_CALLS
from ledger.observability.summary import SummaryCollector, tool_label
from ledger.policy import configversion
from ledger.policy.configversion import VersionedCache

MULTIPROCESS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

# This process's own counters (in multiprocess mode they are also written to the shared files,
# and the scrape reads those instead).
_local = CollectorRegistry()

TRANSITIONS = Counter(
    "ledger_transitions",
    "Committed status transitions of effects.",
    ["from_status", "to_status"],
    registry=_local,
)
RECONCILIATIONS = Counter(
    "ledger_reconciliations",
    "Reconciliation checks recorded, by tool and what the provider answered "
    "(found, not_found, inconclusive; no_lookup when nobody could be asked).",
    ["tool", "outcome"],
    registry=_local,
)
LIMIT_REFUSALS = Counter(
    "ledger_limit_refusals",
    "Claims refused by a limit, by the limit's scope (tool, agent) and kind "
    "(claims_per_minute, amount_per_day).",
    ["scope", "kind"],
    registry=_local,
)
_local.register(API_CALLS)

summary = SummaryCollector()


def _scrape_registry() -> CollectorRegistry:
    if not MULTIPROCESS_DIR:
        _local.register(summary)
        return _local
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=MULTIPROCESS_DIR)
    registry.register(summary)
    return registry


_registry = _scrape_registry()


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


def _authorized(request: HttpRequest, token: str) -> bool:
    scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(offered.encode(), token.encode())


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.LEDGER_METRICS_TOKEN
    if not token:
        return HttpResponse("Not found.\n", status=404, content_type="text/plain")
    if request.method != "GET":
        response = HttpResponse("Only GET.\n", status=405, content_type="text/plain")
        response["Allow"] = "GET"
        return response
    if not _authorized(request, token):
        response = HttpResponse(
            "A bearer token (LEDGER_METRICS_TOKEN) is required.\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(_registry), content_type=CONTENT_TYPE_LATEST)
