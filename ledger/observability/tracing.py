"""W3C trace context on the agent API: a caller's `traceparent` names the trace its call belongs
to. The trace id is kept in the data of every event the call writes (so it shows in the journal
and the exports, and is sealed with them), bound into the log context, and, when an
OpenTelemetry SDK is configured in this process, continued as a server span.

Without `opentelemetry-api`, or with the API but no SDK (its default no-op provider), nothing
is imported or started per request: the cost is one header read and one regular expression.
A malformed header is ignored, as the W3C Trace Context recommendation says a receiver should.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from django.http import HttpRequest, HttpResponse

from ledger.observability import logcontext

# version-traceid-parentid-flags; an all-zero trace or parent id is invalid, and so is ff.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_trace_id: ContextVar[str | None] = ContextVar("ledger_trace_id", default=None)


def parse_traceparent(header: str) -> str | None:
    """The trace id of a valid `traceparent` header, else None."""
    match = _TRACEPARENT.fullmatch(header.strip().lower()[:55])
    if match is None:
        return None
    version, trace_id, parent_id, _ = match.groups()
    if version == "ff" or set(trace_id) == {"0"} or set(parent_id) == {"0"}:
        return None
    return trace_id


def current_trace_id() -> str | None:
    """The trace the request being served belongs to, if its caller said."""
    return _trace_id.get()


def _sdk_tracer() -> Any:
    """A tracer when an OpenTelemetry SDK is configured, else None (the API alone is a no-op,
    and continuing a span through it would only cost time)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return None
    return trace.get_tracer("effect-ledger")


@contextlib.contextmanager
def _span(request: HttpRequest) -> Iterator[None]:
    tracer = _sdk_tracer()
    if tracer is None:
        yield
        return
    from opentelemetry import propagate, trace

    parent = propagate.extract({"traceparent": request.META.get("HTTP_TRACEPARENT", "")})
    name = f"{request.method} {request.path}"
    with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.SERVER):
        yield


class TraceContextMiddleware:
    """Reads `traceparent` on agent API calls (after the request id middleware, whose log
    context it extends)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        header = request.META.get("HTTP_TRACEPARENT")
        on_api = request.path.startswith("/api/")
        trace_id = parse_traceparent(header) if header and on_api else None
        if trace_id is None:
            return self.get_response(request)
        token = _trace_id.set(trace_id)
        logcontext.bind(trace_id=trace_id)
        try:
            with _span(request):
                return self.get_response(request)
        finally:
            _trace_id.reset(token)
