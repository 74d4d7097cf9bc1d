"""The agent API's latency histogram: one observation per call under /api/, by method, route
template and status, taken by `logcontext.RequestIdMiddleware` where it already times the call
for its log line.

No model is imported here: the middleware module is loaded while logging is configured, before
the apps are ready. `ledger.observability.metrics` registers the histogram for the scrape.

Every label is bounded whatever a client sends: the route is the URL pattern the request
resolved to (`/api/v1/effects/{effect_id}/outcome`), never the raw path; a path that resolves to
nothing is `unmatched`; a method outside the usual few is `other`. A long poll (a GET that asks
to `wait`) takes the route with `?wait` appended, so that its waiting, which is what the caller
asked for, is not mistaken for slowness.
"""

from __future__ import annotations

from functools import lru_cache

from django.http import HttpRequest
from django.urls import Resolver404, resolve
from prometheus_client import Histogram

# Seconds. Most calls take a few milliseconds; long polls wait up to a minute.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
UNMATCHED = "unmatched"
LONG_POLL = "?wait"

API_CALLS = Histogram(
    "ledger_api_request_duration_seconds",
    "Agent API calls (everything under /api/) by method, route template and status: how long "
    "each took, from the first middleware to the response.",
    ["method", "route", "status"],
    buckets=BUCKETS,
    registry=None,  # registered by ledger.observability.metrics
)


@lru_cache(maxsize=256)
def template(route: str) -> str:
    """Django's route (`api/v1/effects/<effect_id>/outcome`) as the API reference writes it
    (`/api/v1/effects/{effect_id}/outcome`). Routes are the URLconf's, so the cache is bounded
    by it."""
    parts = []
    for segment in route.split("/"):
        if segment.startswith("<") and segment.endswith(">"):
            segment = "{" + segment[1:-1].rpartition(":")[2] + "}"
        parts.append(segment)
    return "/" + "/".join(parts)


def route_of(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        # Answered before the URL was resolved (a body too large, a NUL in the URL), or not
        # found: resolved here, on those calls only.
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return UNMATCHED
    route = template(match.route)
    if request.method == "GET" and "wait" in request.GET:
        route += LONG_POLL
    return route


def observe(request: HttpRequest, status: int, seconds: float) -> None:
    """Count one API call: an in-memory (or, under gunicorn, memory-mapped file) increment."""
    method = request.method if request.method in METHODS else "other"
    API_CALLS.labels(method, route_of(request), str(status)).observe(seconds)
