"""No request can produce a 500 by its content (docs/api.md#errors): generated bodies, shaped like
the real ones or not, posted as intents and outcomes, are each a JSON 4xx or a success.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st


@pytest.fixture
def effect(alice) -> dict[str, Any]:
    """Alice's effect, claimed: the lease token is in `lease_token`."""
    return alice.intent(claim=True, claim_id="c1")


# --- Whatever the body, never a 500 -------------------------------------------------------

_any_char = st.characters(codec=None, exclude_categories=())
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(_any_char, max_size=30),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(_any_char, max_size=10), children, max_size=5)
    ),
    max_leaves=25,
)
# Shaped like the real bodies, so that generated values reach the schema, the JSON checks
# and the ledger, not only the parser.
intent_like = st.fixed_dictionaries(
    {
        "run_id": st.text(_any_char, max_size=20) | json_values,
        "step_id": st.text(_any_char, max_size=20),
        "tool": st.sampled_from(["charge_card", "send_email", "made_up"]) | json_values,
        "target": st.text(_any_char, max_size=20),
        "request": st.dictionaries(st.text(_any_char, max_size=10), json_values, max_size=5),
    },
    optional={
        "effect_key": st.text(_any_char, max_size=20),
        "depends_on": st.lists(st.uuids().map(str) | st.text(max_size=5), max_size=3),
        "provenance": st.dictionaries(
            st.sampled_from(["model", "prompt_hash", "model_output", "policy", "x"]), json_values
        ),
        "claim": json_values,
        "owner": json_values,
        "claim_id": json_values,
        "lease_seconds": st.integers(-10, 5000) | json_values,
    },
)
# Lease tokens are ASCII here only because a non-ASCII one is a known 500, pinned by
# test_a_non_ascii_lease_token_on_an_outcome_is_a_4xx: widen to `_any_char` once it is fixed.
_ascii_char = st.characters(max_codepoint=127)
outcome_like = st.fixed_dictionaries(
    {
        "lease_token": st.text(_ascii_char, max_size=70)
        | st.none()
        | st.integers()
        | st.lists(json_values, max_size=3),
        "status": st.sampled_from(["confirmed", "failed", "unknown", "not_sent", "x"])
        | json_values,
    },
    optional={
        "provider_ref": st.text(_any_char, max_size=30) | json_values,
        "response": json_values,
        "error": json_values,
    },
)


def _as_body(value: Any) -> bytes:
    """JSON text for values; text as the bytes a client would send (a lone surrogate becomes
    the bytes a careless encoder writes for it)."""
    if isinstance(value, bytes):
        return value
    text = value if isinstance(value, str) else json.dumps(value)
    return text.encode("utf-8", "surrogatepass")


random_bodies = st.one_of(
    json_values.map(_as_body),
    intent_like.map(_as_body),
    outcome_like.map(_as_body),
    st.text(_any_char, max_size=200).map(_as_body),
    st.binary(max_size=200),
)


def _assert_not_a_server_error(response) -> None:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json")
        body = response.json()
        assert isinstance(body["error"], str) and isinstance(body["detail"], str)


@hypothesis_settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(body=random_bodies)
def test_no_body_posted_as_an_intent_produces_a_500(alice, body):
    _assert_not_a_server_error(alice.post("/effects", raw=body))


@hypothesis_settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(body=random_bodies)
def test_no_body_posted_as_an_outcome_produces_a_500(alice, effect, body):
    _assert_not_a_server_error(alice.post(f"/effects/{effect['id']}/outcome", raw=body))
