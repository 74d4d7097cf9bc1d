"""W3C trace context for the ledger's calls: with `opentelemetry-api` installed and a span
active, each call carries `traceparent` (and `tracestate`), and the ledger keeps the trace id in
the events the call writes. Without the package, nothing is imported and nothing is sent."""

from __future__ import annotations

from typing import Any

try:
    from opentelemetry import propagate as _propagate
except ImportError:  # the optional extra is not installed
    _propagate: Any = None  # type: ignore[no-redef]


def trace_headers() -> dict[str, str]:
    """The current trace context as headers (empty without OpenTelemetry or an active span)."""
    if _propagate is None:
        return {}
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return carrier
