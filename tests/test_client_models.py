"""The client's typed models against the ledger's own OpenAPI document: every field the
server's schema has, the model has, with a compatible type, and no model field is made up.
A change on either side fails here before any agent meets it."""

from __future__ import annotations

import types
import typing
from datetime import datetime
from typing import Any, Literal, get_args, get_origin

import pytest
from django.test import Client
from ledger_client import models, operator
from pydantic import BaseModel


@pytest.fixture(scope="module")
def components(django_db_blocker) -> dict[str, Any]:
    with django_db_blocker.unblock():
        spec = Client().get("/api/v1/openapi.json").json()
    return spec["components"]["schemas"]


# client model -> the server schemas it reads (the claimer's and the heartbeat's view add
# fields to EffectOut, and the client reads all three with one model).
PAIRS = [
    (models.EffectRecord, ["EffectOut", "ClaimedEffectOut", "HeartbeatOut"]),
    (models.Halt, ["HaltOut"]),
    (models.Upstream, ["UpstreamOut"]),
    (models.Provenance, ["ProvenanceOut"]),
    (models.EffectPage, ["EffectPage"]),
    (models.RecoveryItem, ["RecoveryItem"]),
    (models.RecoveryPlan, ["RecoveryOut"]),
    (models.Health, ["HealthOut"]),
    (models.Refusal, ["ErrorOut"]),
    # The operator API (ledger_client.operator).
    (operator.QueueRow, ["QueueRowOut"]),
    (operator.QueuePage, ["QueuePageOut"]),
    (operator.EffectSummary, ["EffectSummaryOut"]),
    (operator.OpenItem, ["ItemOut"]),
    (operator.PreviewLine, ["PreviewLineOut"]),
    (operator.Preview, ["PreviewOut"]),
    (operator.Offered, ["OfferedOut"]),
    (operator.Suggested, ["SuggestedOut"]),
    (operator.FourEyes, ["FourEyesOut"]),
    (operator.OperatorItem, ["OperatorItemOut"]),
    (operator.DecisionResult, ["DecisionOut"]),
]


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return components[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _kinds(schema: dict[str, Any], components: dict[str, Any]) -> set[str]:
    """The JSON kinds a server property may hold ("string", "integer", "null", "object", ...)."""
    schema = _resolve(schema, components)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return set().union(*(_kinds(s, components) for s in schema[key]))
    if "enum" in schema and "type" not in schema:
        return {type(v).__name__.replace("str", "string") for v in schema["enum"]}
    if "type" not in schema:
        return {"any"}
    kind = schema["type"]
    return set(kind) if isinstance(kind, list) else {kind}


_PY_KINDS = {
    str: {"string"},
    int: {"integer"},
    float: {"number", "integer"},
    bool: {"boolean"},
    datetime: {"string"},
    type(None): {"null"},
    dict: {"object"},
    list: {"array"},
}


def _model_kinds(annotation: Any) -> set[str]:
    origin = get_origin(annotation)
    if annotation is Any:
        return {"any"}
    if origin is typing.Annotated:
        return _model_kinds(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_model_kinds(a) for a in get_args(annotation)))
    if origin is Literal:
        return {"string" if isinstance(v, str) else "boolean" for v in get_args(annotation)}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {"object"}
    return _PY_KINDS.get(origin or annotation, {"any"})


@pytest.mark.parametrize(("model", "schemas"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_each_model_has_exactly_the_fields_of_its_schemas(components, model, schemas):
    server: dict[str, dict[str, Any]] = {}
    for name in schemas:
        server.update(components[name]["properties"])
    fields = model.model_fields

    assert set(server) - set(fields) == set(), f"{model.__name__} lacks server fields"
    # Refusal names the code-specific fields of docs/api.md "Errors", which ErrorOut leaves
    # open; every other model has only what the server declares.
    extra = set(fields) - set(server)
    if model is models.Refusal:
        assert extra <= {
            "fields",
            "status",
            "effect_id",
            "halt",
            "limit",
            "retry_after",
            "blocked_by",
            "max_attempts",
        }
    else:
        assert extra == set(), f"{model.__name__} has fields the server does not send"
    for name, prop in server.items():
        theirs, ours = _kinds(prop, components), _model_kinds(fields[name].annotation)
        if "any" in theirs or "any" in ours:
            continue
        assert theirs <= ours, f"{model.__name__}.{name}: server {theirs}, client {ours}"


@pytest.mark.parametrize(("model", "schemas"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_what_the_server_requires_the_model_requires(components, model, schemas):
    required = set(components[schemas[0]].get("required", []))
    optional_in_model = {n for n, f in model.model_fields.items() if not f.is_required()}
    # A model may default a field the server always sends (counts_by_status), never the other
    # way round: a field the server may omit must not be required by the client.
    for name in set(model.model_fields) - required:
        if name in components[schemas[0]]["properties"]:
            assert name in optional_in_model, f"{model.__name__}.{name} may be omitted"


def test_statuses_and_recovery_actions_match_the_server(components):
    server_status = set(_resolve({"$ref": "#/components/schemas/Status"}, components)["enum"])
    assert set(get_args(models.Status)) == server_status
    action = components["RecoveryItem"]["properties"]["action"]
    assert set(get_args(models.Action)) == set(action["enum"])


def test_a_redacted_request_and_response_read_as_redacted():
    record = models.EffectRecord.model_validate(
        _effect(request={"redacted": True}, response={"redacted": True})
    )
    assert isinstance(record.request, models.Redacted) and record.redacted
    assert isinstance(record.response, models.Redacted)
    plain = models.EffectRecord.model_validate(_effect(response={"id": "ch_1", "redacted": True}))
    assert plain.response == {"id": "ch_1", "redacted": True} and not plain.redacted


def _effect(**fields: Any) -> dict[str, Any]:
    base = {
        "id": "6e32be0b-9319-4b3d-95f1-62194a7f6d76",
        "effect_key": "r:s",
        "run_id": "r",
        "step_id": "s",
        "seq": 1,
        "agent": "a",
        "tool": "t",
        "target": "x",
        "kind": "action",
        "status": "confirmed",
        "attempt": 1,
        "max_attempts": 3,
        "idempotency_key": "el_x",
        "lease_owner": "",
        "lease_expires_at": None,
        "provider_ref": "",
        "request": {},
        "response": None,
        "error": None,
        "depends_on": [],
        "blocked_by": [],
        "parent_id": None,
        "requested_by": "agent",
        "provenance": {},
        "created_at": "2026-12-04T10:00:00Z",
        "updated_at": "2026-12-04T10:00:00Z",
        "resolved_at": None,
    }
    return {**base, **fields}
