"""Who may call the agent API, and what one agent can see of another's effects.

Agents authenticate with `Authorization: Bearer <key>`; no, a wrong or a revoked key is 401
`unauthorized`. An agent reads and changes only its own effects: another agent's effect is 404
`not_found`, exactly like an effect that does not exist, so existence does not leak. Only
`depends_on` may name another agent's effect, and `blocked_by` then shows its id and status.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from ledger.containment.keys import issue_key, revoke
from ledger.models import Agent, Effect, EffectEvent
from ledger.policy.agentkeys import key_prefix
from tests.helpers import assert_error

# (method, path) of every endpoint that needs a key; `{id}` is an effect id.
KEYED_ENDPOINTS = [
    ("post", "/effects"),
    ("get", "/effects"),
    ("get", "/effects/{id}"),
    ("post", "/effects/{id}/claim"),
    ("post", "/effects/{id}/heartbeat"),
    ("post", "/effects/{id}/end-lease"),
    ("post", "/effects/{id}/outcome"),
    ("post", "/effects/{id}/cancel"),
    ("post", "/effects/{id}/compensate"),
    ("post", "/recovery"),
    ("get", "/runs/run-1/journal"),
]


def call(method: str, path: str, authorization: str | None, body: Any = None):
    headers = {} if authorization is None else {"Authorization": authorization}
    http = Client()
    if method == "get":
        return http.get(f"/api/v1{path}", headers=headers)
    return http.post(
        f"/api/v1{path}",
        json.dumps(body if body is not None else {}),
        content_type="application/json",
        headers=headers,
    )


def snapshot() -> tuple[int, int, dict[Any, tuple[str, int]]]:
    """Counts of effects and events, and every effect's status and version."""
    return (
        Effect.objects.count(),
        EffectEvent.objects.count(),
        {e.id: (e.status, e.version) for e in Effect.objects.all()},
    )


INTENT = {
    "run_id": "run-1",
    "step_id": "step-1",
    "tool": "charge_card",
    "target": "acct_42",
    "request": {"amount": "10.00", "currency": "EUR"},
}


def _prefix(key: str) -> str:
    prefix = key_prefix(key)
    assert prefix is not None
    return prefix


# --- Authentication -------------------------------------------------------------------------


def test_a_valid_key_is_accepted(alice):
    """The positive control for every 401 below."""
    response = call("get", "/effects", f"Bearer {alice.key}")
    assert response.status_code == 200, response.content


def _bad_authorizations(key: str) -> dict[str, str | None]:
    prefix = _prefix(key)
    return {
        "no header": None,
        "empty header": "",
        "scheme only": "Bearer",
        "empty key": "Bearer ",
        "wrong scheme": f"Basic {key}",
        "token scheme": f"Token {key}",
        "key without scheme": key,
        "garbage key": "Bearer garbage",
        "right prefix, wrong secret": f"Bearer elk_{prefix}_{'x' * 43}",
        "right prefix, no secret": f"Bearer elk_{prefix}_",
        "key cut short": f"Bearer {key[:-1]}",
        "key with a character more": f"Bearer {key}x",
        "key in another case": f"Bearer {key.upper()}",
        "unknown prefix": f"Bearer elk_{'0' * 12}_{key.split('_', 2)[2]}",
        "over long key": f"Bearer {key}{'x' * 300}",
        "non-ASCII key": "Bearer elk_éééééééééééé_x",
    }


@pytest.mark.parametrize(
    "case",
    list(_bad_authorizations("elk_000000000000_secret")),
)
@pytest.mark.parametrize(("method", "path"), KEYED_ENDPOINTS)
def test_it_refuses_a_missing_or_wrong_key_on_every_endpoint(alice, method, path, case):
    effect = alice.intent(claim=True)
    authorization = _bad_authorizations(alice.key)[case]
    before = snapshot()
    response = call(method, path.format(id=effect["id"]), authorization, INTENT)
    assert_error(response, 401, "unauthorized")
    assert snapshot() == before


def test_it_refuses_a_revoked_key(alice):
    assert call("get", "/effects", f"Bearer {alice.key}").status_code == 200
    assert revoke(_prefix(alice.key))
    before = snapshot()
    assert_error(call("get", "/effects", f"Bearer {alice.key}"), 401, "unauthorized")
    assert_error(call("post", "/effects", f"Bearer {alice.key}", INTENT), 401, "unauthorized")
    assert snapshot() == before


def test_revoking_one_key_leaves_the_agents_other_keys_working(alice):
    second = issue_key(alice.agent, label="spare")
    revoke(_prefix(alice.key))
    assert call("get", "/effects", f"Bearer {alice.key}").status_code == 401
    assert call("get", "/effects", f"Bearer {second}").status_code == 200


def test_it_refuses_the_key_of_a_deactivated_agent(alice):
    Agent.objects.filter(pk=alice.agent.pk).update(is_active=False)
    before = snapshot()
    assert_error(call("get", "/effects", f"Bearer {alice.key}"), 401, "unauthorized")
    assert_error(call("post", "/effects", f"Bearer {alice.key}", INTENT), 401, "unauthorized")
    assert snapshot() == before


def test_the_refusal_does_not_say_which_part_of_the_key_was_wrong(alice):
    """A wrong secret, a revoked key and a made-up key all get the same answer."""
    wrong_secret = call("get", "/effects", f"Bearer elk_{_prefix(alice.key)}_{'x' * 43}")
    made_up = call("get", "/effects", "Bearer elk_0123456789ab_whatever")
    spare = issue_key(alice.agent)
    revoke(_prefix(spare))
    revoked = call("get", "/effects", f"Bearer {spare}")
    assert wrong_secret.json() == made_up.json() == revoked.json()


def test_health_needs_no_key(db):
    response = Client().get("/api/v1/health")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "redis": "ok",
        "restore_mode": False,
    }


def test_a_key_is_recorded_as_the_agent_and_a_body_cannot_claim_another(alice, bob):
    effect = alice.intent()
    assert effect["agent"] == "alice"
    response = bob.post("/effects", {**INTENT, "agent": "alice"})
    assert response.status_code == 422
    assert Effect.objects.get(pk=effect["id"]).agent == alice.agent
    assert not Effect.objects.filter(agent=bob.agent).exists()


# --- The schema and documentation ----------------------------------------------------------

# The endpoints of docs/api.md, as (method, path) under /api/v1.
DOCUMENTED = {
    ("post", "/effects"),
    ("get", "/effects"),
    ("get", "/effects/{effect_id}"),
    ("post", "/effects/{effect_id}/claim"),
    ("post", "/effects/{effect_id}/heartbeat"),
    ("post", "/effects/{effect_id}/end-lease"),
    ("post", "/effects/{effect_id}/outcome"),
    ("post", "/effects/{effect_id}/cancel"),
    ("post", "/effects/{effect_id}/compensate"),
    ("post", "/recovery"),
    ("get", "/runs/{run_id}/journal"),
    ("post", "/webhooks/{provider}"),
    ("get", "/health"),
}


def test_the_openapi_schema_is_served_without_a_key_and_lists_every_documented_endpoint(db):
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    served = {
        (method, path.removeprefix("/api/v1"))
        for path, operations in schema["paths"].items()
        for method in operations
    }
    assert served >= DOCUMENTED


def test_the_openapi_schema_says_which_endpoints_need_a_key(db):
    schema = Client().get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    assert paths["/api/v1/effects"]["post"].get("security")
    assert not paths["/api/v1/health"]["get"].get("security")
    assert "422" in paths["/api/v1/effects"]["post"]["responses"]


def test_the_browsable_docs_are_served(db):
    response = Client().get("/api/v1/docs")
    assert response.status_code == 200
    assert b"openapi.json" in response.content


# --- Unknown paths and wrong methods -------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/api/v1/nope", "/api/v1/effects/x/y/z", "/api/v1/runs/run-1", "/api/v2/effects"]
)
def test_an_unknown_path_under_the_api_is_a_json_404(alice, path):
    for headers in ({}, {"Authorization": f"Bearer {alice.key}"}):
        response = Client().get(path, headers=headers)
        assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("delete", "/effects/{id}"),
        ("put", "/effects/{id}"),
        ("patch", "/effects"),
        ("get", "/effects/{id}/claim"),
        ("get", "/recovery"),
        ("post", "/health"),
        ("delete", "/runs/run-1/journal"),
    ],
)
def test_a_wrong_method_is_a_json_405(alice, method, path):
    effect = alice.intent()
    before = snapshot()
    response = getattr(Client(), method)(
        f"/api/v1{path.format(id=effect['id'])}",
        headers={"Authorization": f"Bearer {alice.key}"},
    )
    assert_error(response, 405, "method_not_allowed")
    assert snapshot() == before


# --- Isolation between agents ---------------------------------------------------------------


def _confirmed(client, step_id: str) -> dict[str, Any]:
    effect = client.intent(step_id=step_id, claim=True)
    return client.outcome(effect["id"], effect["lease_token"], provider_ref=f"ch_{step_id}")


@pytest.fixture
def alices_effects(alice) -> dict[str, dict[str, Any]]:
    """One of alice's effects in each state another agent might try to act on."""
    return {
        "planned": alice.intent(step_id="planned"),
        "dispatching": alice.intent(
            step_id="dispatching", claim=True, claim_id="c1", owner="alice-worker"
        ),
        "confirmed": _confirmed(alice, "confirmed"),
    }


ACTIONS = ["get", "claim", "cancel", "heartbeat", "end-lease", "outcome", "compensate"]


def _act(client, action: str, effects: dict[str, dict[str, Any]], effect_id: str | None = None):
    """`client` acting on alice's effect, holding everything alice holds (even her token)."""
    token = effects["dispatching"]["lease_token"]
    target = {
        "get": "planned",
        "claim": "planned",
        "cancel": "planned",
        "heartbeat": "dispatching",
        "end-lease": "dispatching",
        "outcome": "dispatching",
        "compensate": "confirmed",
    }[action]
    eid = effect_id or effects[target]["id"]
    if action == "get":
        return client.get(f"/effects/{eid}")
    body = {
        "claim": {"owner": "bob-worker", "claim_id": "c1"},
        "cancel": {"reason": "bob says so"},
        "heartbeat": {"lease_token": token, "lease_seconds": 600},
        "end-lease": {"owner": effects["dispatching"]["lease_owner"]},
        "outcome": {"lease_token": token, "status": "failed", "error": "bob"},
        "compensate": {"request": {"amount": "10.00"}, "reason": "bob"},
    }[action]
    return client.post(f"/effects/{eid}/{action}", body)


@pytest.mark.parametrize("action", ACTIONS)
def test_another_agents_effect_is_not_found_and_left_untouched(alice, bob, alices_effects, action):
    before = snapshot()
    response = _act(bob, action, alices_effects)
    assert_error(response, 404, "not_found")
    assert snapshot() == before


@pytest.mark.parametrize("action", ACTIONS)
def test_another_agents_effect_looks_exactly_like_one_that_does_not_exist(
    bob, alices_effects, action
):
    theirs = _act(bob, action, alices_effects)
    missing = _act(bob, action, alices_effects, effect_id=str(uuid.uuid4()))
    assert (theirs.status_code, theirs.json()) == (missing.status_code, missing.json())


@pytest.mark.parametrize("action", ACTIONS)
def test_the_owner_can_do_what_the_other_agent_was_refused(alice, alices_effects, action):
    """The positive control: the same requests from alice succeed."""
    response = _act(alice, action, alices_effects)
    assert response.status_code in (200, 201), response.content


def test_listing_shows_only_the_callers_effects(alice, bob, alices_effects):
    mine = bob.intent(step_id="bobs")
    for params in ({}, {"run_id": "run-1"}, {"status": "planned"}, {"tool": "charge_card"}):
        response = bob.get("/effects", params)
        assert response.status_code == 200
        assert [item["id"] for item in response.json()["items"]] == [mine["id"]], params
    assert len(alice.get("/effects").json()["items"]) == len(alices_effects)


def test_the_journal_shows_only_the_callers_effects_of_a_shared_run_id(alice, bob, alices_effects):
    mine = bob.intent(step_id="bobs")
    response = bob.get("/runs/run-1/journal")
    assert response.status_code == 200
    items = response.json()["items"]
    assert [item["id"] for item in items] == [mine["id"]]
    assert items[0]["seq"] == 1
    alices = alice.get("/runs/run-1/journal").json()["items"]
    assert {item["id"] for item in alices} == {e["id"] for e in alices_effects.values()}


def test_recovery_neither_shows_nor_touches_another_agents_effects(alice, bob, alices_effects):
    # alice's worker died: her lease ran out (back-dated, by the database clock).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET lease_expires_at = now() - interval '1 hour' WHERE id = %s",
            [alices_effects["dispatching"]["id"]],
        )
    mine = bob.intent(step_id="bobs")
    before = snapshot()
    for dry_run in (True, False):
        response = bob.post("/recovery", {"dry_run": dry_run})
        assert response.status_code == 200, response.content
        plan = response.json()
        assert [item["effect"]["id"] for item in plan["effects"]] == [mine["id"]]
        assert plan["counts_by_status"] == {"planned": 1}
    assert snapshot() == before
    for owner in ("", "worker-1"):
        scoped = bob.post("/recovery", {"owner": owner, "dry_run": True}).json()
        assert all(i["effect"]["agent"] == "bob" for i in scoped["effects"])
    alices_plan = alice.post("/recovery", {"dry_run": True}).json()
    assert alices_effects["dispatching"]["id"] in {
        i["effect"]["id"] for i in alices_plan["effects"]
    }


# --- Interlocks across agents ----------------------------------------------------------------


def test_an_agent_may_depend_on_another_agents_effect_and_sees_only_its_id_and_status(alice, bob):
    upstream = alice.intent(
        step_id="charge", request={"amount": "99.00", "note": "alice's secret plan"}
    )
    downstream = bob.intent(step_id="ship", depends_on=[upstream["id"]])
    assert downstream["depends_on"] == [upstream["id"]]
    assert downstream["blocked_by"] == [{"id": upstream["id"], "status": "planned"}]

    shown = bob.get(f"/effects/{downstream['id']}")
    assert shown.json()["blocked_by"] == [{"id": upstream["id"], "status": "planned"}]
    for leaked in (b"alice", b"99.00", b"secret plan", upstream["idempotency_key"].encode()):
        assert leaked not in shown.content

    refused = bob.post(f"/effects/{downstream['id']}/claim", {"owner": "bob-worker"})
    body = assert_error(refused, 409, "blocked")
    assert body["blocked_by"] == [{"id": upstream["id"], "status": "planned"}]
    assert b"secret plan" not in refused.content

    # Naming it in depends_on gives bob no access to it.
    assert_error(bob.get(f"/effects/{upstream['id']}"), 404, "not_found")


def test_another_agents_confirmation_unblocks_the_dependent(alice, bob):
    upstream = alice.intent(step_id="charge", claim=True)
    downstream = bob.intent(step_id="ship", depends_on=[upstream["id"]])
    assert_error(bob.post(f"/effects/{downstream['id']}/claim", {}), 409, "blocked")
    alice.outcome(upstream["id"], upstream["lease_token"], provider_ref="ch_1")
    claimed = bob.claim(downstream["id"])
    assert claimed["status"] == "dispatching"
    assert claimed["blocked_by"] == []


def test_another_agents_failure_cancels_the_dependent(alice, bob):
    upstream = alice.intent(step_id="charge", claim=True)
    downstream = bob.intent(step_id="ship", depends_on=[upstream["id"]])
    alice.outcome(upstream["id"], upstream["lease_token"], "failed", error="declined")
    shown = bob.get(f"/effects/{downstream['id']}").json()
    assert shown["status"] == "cancelled"
    assert shown["blocked_by"] == [{"id": upstream["id"], "status": "failed"}]
