"""W3C trace context: a `traceparent` on an agent call puts its trace id into the events the call
writes (and so into the audit export), a malformed one is ignored, and the client sends the
current span's context when OpenTelemetry is in use."""

from __future__ import annotations

import pytest
from ledger_client import Ledger, bind_step, guarded
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from ledger.models import EffectEvent
from ledger.observability.tracing import parse_traceparent
from tests.factories import signed_in
from tests.test_exports import exported

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


def test_the_trace_id_of_a_traced_call_is_kept_in_its_events_and_exported(alice, audrey):
    response = alice.post(
        "/effects",
        {
            "run_id": "run-1",
            "step_id": "step-1",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "10.00", "currency": "EUR"},
            "claim": True,
        },
        traceparent=PARENT,
    )
    assert response.status_code == 201, response.content
    effect = response.json()
    events = EffectEvent.objects.filter(effect_id=effect["id"])
    assert [e.data.get("trace_id") for e in events] == [TRACE, TRACE]

    untraced = alice.intent("run-1", "step-2")
    assert "trace_id" not in EffectEvent.objects.get(effect_id=untraced["id"]).data

    rows = exported(signed_in(audrey), "events", "jsonl")
    assert {r["data"].get("trace_id") for r in rows if r["effect_id"] == effect["id"]} == {TRACE}


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"ff-{TRACE}-00f067aa0ba902b7-01",
        f"00-{TRACE.upper()}x-00f067aa0ba902b7-01",
    ],
)
def test_a_malformed_traceparent_is_ignored(header):
    assert parse_traceparent(header) is None


def test_a_valid_traceparent_gives_its_trace_id():
    assert parse_traceparent(PARENT) == TRACE
    assert parse_traceparent(PARENT.upper()) == TRACE


@pytest.mark.django_db(transaction=True)
def test_the_client_sends_the_current_span_and_the_ledger_keeps_its_trace(stage):
    provider = TracerProvider()
    tracer = provider.get_tracer("agent")
    with Ledger(stage.url, stage.key, owner="traced") as ledger:

        @guarded(tool="get_balance", ledger=ledger)
        def balance(account: str) -> dict[str, str]:
            return {"id": "bal_1"}

        with tracer.start_as_current_span("agent-step") as span, bind_step("run-t", "call-1"):
            balance("acct_1")
            trace_id = format(span.get_span_context().trace_id, "032x")

    [effect] = stage.effects()
    traces = {e.data.get("trace_id") for e in EffectEvent.objects.filter(effect_id=effect.id)}
    assert traces == {trace_id}
    assert trace.get_tracer_provider() is not provider  # the global provider was not touched


def test_with_an_sdk_configured_the_ledger_continues_the_callers_trace(alice):
    """The process-wide provider is set once (OpenTelemetry allows no second); every later
    traced call in this process then also makes a span, which costs the other tests nothing."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:
        pytest.fail("another test set the process's tracer provider first")

    response = alice.http.get(
        "/api/v1/effects",
        headers={"Authorization": f"Bearer {alice.key}", "traceparent": PARENT},
    )
    assert response.status_code == 200

    [span] = [s for s in exporter.get_finished_spans() if s.name == "GET /api/v1/effects"]
    assert format(span.context.trace_id, "032x") == TRACE
    assert span.parent is not None and format(span.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert span.kind == trace.SpanKind.SERVER
