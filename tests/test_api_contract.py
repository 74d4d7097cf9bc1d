"""What the served OpenAPI document declares, one rule at a time (docs/api.md, "What the schema
declares"); tests/test_schemathesis.py runs the fuzzer over all of it."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.api import callbacktargets
from ledger.api.contract import NO_NUL, _target_pattern


def served_schema() -> dict:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_every_operation_has_a_stable_id_and_a_tag():
    operations = [op for path in served_schema()["paths"].values() for op in path.values()]
    ids = [op["operationId"] for op in operations]
    # 13 of the agent API (webhooks and callbacks included), 3 of the operator API.
    assert len(set(ids)) == len(ids) == 17
    assert all(re.fullmatch(r"[a-z][A-Za-z]+", name) for name in ids), ids
    assert all(op.get("tags") for op in operations)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("delete", "/api/v1/recovery", "POST"),
        ("put", "/api/v1/effects", "GET, POST"),
        ("patch", "/api/v1/health", "GET"),
        ("trace", "/api/v1/effects/6fd5c60a-1a43-4b7a-b492-15787f31f6b8/claim", "POST"),
    ],
)
def test_a_405_names_the_methods_the_path_accepts(alice, method, path, allowed):
    response = Client().generic(method.upper(), path, headers=alice._headers())
    assert response.status_code == 405
    assert response["Allow"] == allowed
    assert response.json()["error"] == "method_not_allowed"


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_body_not_sent_as_json_is_415(alice, kind):
    response = Client().post("/api/v1/recovery", "{}", content_type=kind, headers=alice._headers())
    assert response.status_code == 415, response.content
    assert response.json()["error"] == "unsupported_media_type"


@pytest.mark.parametrize("raw", ["5.7e16", "1.5", "[]", "null"])
def test_a_body_that_is_not_an_object_is_422(alice, raw):
    response = alice.post("/recovery", raw=raw)
    assert response.status_code == 422, response.content
    assert response.json()["fields"] == {"body": "must be an object"}


def test_the_lease_maximum_is_the_deployments(settings):
    settings.LEDGER_MAX_LEASE_SECONDS = 600
    claim = served_schema()["components"]["schemas"]["ClaimIn"]["properties"]["lease_seconds"]
    assert {"minimum": 1, "maximum": 600, "type": "integer"}.items() <= claim["anyOf"][0].items()


def test_every_input_string_refuses_nul():
    schema = served_schema()
    intent = schema["components"]["schemas"]["IntentIn"]["properties"]
    assert intent["run_id"]["pattern"] == NO_NUL
    journal = schema["paths"]["/api/v1/runs/{run_id}/journal"]["get"]["parameters"]
    assert {p["name"]: p["schema"].get("pattern") for p in journal}["run_id"] == NO_NUL


def test_a_whole_number_limit_is_an_integer(alice):
    assert alice.post("/recovery", {"limit": 434.0}).status_code == 200


@pytest.mark.parametrize(
    ("path", "cursor"),
    [
        ("/effects", f"{'9' * 18}.{'f' * 32}"),
        ("/effects", f"0.{'0' * 32}"),
        ("/runs/r/journal", "9" * 18),
    ],
)
def test_any_cursor_the_pattern_admits_is_a_place_in_the_list(alice, path, cursor):
    alice.intent(run_id="r")
    response = alice.get(path, {"cursor": cursor})
    assert response.status_code == 200, response.content


def test_a_recovery_cursor_past_the_end_is_an_empty_page(alice):
    body = alice.post("/recovery", {"cursor": f"2.{'9' * 18}.{'f' * 32}"}).json()
    assert body["effects"] == [] and body["next_cursor"] is None


def test_without_an_allow_list_callback_url_is_null_only(settings):
    settings.LEDGER_CALLBACK_ALLOW = []
    field = served_schema()["components"]["schemas"]["IntentIn"]["properties"]["callback_url"]
    assert field["type"] == "null"


ALLOW = ["https://hooks.example.com", "http://10.0.0.1:8080/agents/", "https://h.example.org/cb"]
ENTRIES = callbacktargets.allow_list(ALLOW)
PATTERN = "|".join(_target_pattern(entry) for entry in ENTRIES)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(url=st.from_regex(f"^(?:{PATTERN})$", fullmatch=True))
def test_every_callback_url_the_pattern_admits_is_allowed(url):
    callbacktargets.check(url, ENTRIES)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://HOOKS.example.com:443/a/b?x=1", True),
        ("http://10.0.0.1:8080/agents/x/..z", True),
        ("https://h.example.org/cbx", False),
        ("https://h.example.org/cb/../x", False),
        ("https://h.example.org/cb/%2e%2e", False),
        ("https://evil.example.com/", False),
    ],
)
def test_the_callback_pattern_agrees_with_the_check(settings, url, allowed):
    settings.LEDGER_CALLBACK_ALLOW = ALLOW
    field = served_schema()["components"]["schemas"]["IntentIn"]["properties"]["callback_url"]
    pattern = next(b["pattern"] for b in field["anyOf"] if b.get("type") == "string")
    assert bool(re.search(pattern, url)) is allowed
    try:
        callbacktargets.check(url, ENTRIES)
    except callbacktargets.CallbackRefused:
        assert not allowed
    else:
        assert allowed
