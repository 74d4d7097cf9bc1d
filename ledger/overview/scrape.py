"""`/metrics`: the counters every process wrote (`ledger.observability.metrics`) and the gauges
of the summary (`ledger.overview.summary`), for Prometheus.

Who may scrape: whoever sends `Authorization: Bearer <LEDGER_METRICS_TOKEN>`. Without the
setting `/metrics` does not exist (404): counts of effects by tool and status are business
data, and a forgotten open endpoint is worse than a missing one.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from ledger.observability.metrics import LOCAL_REGISTRY, MULTIPROCESS_DIR
from ledger.overview.summary import summary


def _scrape_registry() -> CollectorRegistry:
    if not MULTIPROCESS_DIR:
        LOCAL_REGISTRY.register(summary)
        return LOCAL_REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=MULTIPROCESS_DIR)
    registry.register(summary)
    return registry


_registry = _scrape_registry()


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
