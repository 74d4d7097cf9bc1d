"""Business keys: a tool whose declaration names `key_fields` identifies an action by those
request fields (an order id), not by the caller's `run_id:step_id`.

Agent frameworks re-issue calls: a model asked again writes a new call id, or `25.0` for `25`.
With a business key the server derives the effect key from the fields' canonical values with
its HMAC key (`digests.business_key`), so such a repeat is the same effect, answered as a
repeat; the same key with a different request is the usual `effect_key_conflict`. The values
themselves stay only in the request, which retention redacts like any other; the key holds no
value a reader could recover.

An agent that means to do the same action twice on purpose puts what tells the two apart into
a key field (an instalment number), or uses a tool without a business key.

Without a business key, a caller may ask for a key that includes the request
(`key_includes_request`): `run_id:step_id:r…`, the last part a keyed digest of the tool and the
canonical request (`digests.request_key`). The client's adapters do so by default, with a
`step_id` that names the call's position in the run rather than the framework's call id: a call
the model re-issues after a crash, with a new call id, at the same position and with the same
arguments is the same effect; different arguments at that position are a different one.
"""

from __future__ import annotations

from typing import Any

from ledger.errors import ValidationFailed
from ledger.policy import digests
from ledger.policy.money import value_at
from ledger.policy.tools import Policy

# run_id and step_id are at most 200 characters each; with ":" twice and the 17-character
# request part ("r" and 16 base-32 characters), the key must stay within the 400 an effect key
# may have.
_MAX_POSITION = 400 - 2 - 17


def effect_key_for(
    policy: Policy,
    run_id: str,
    step_id: str,
    request: dict[str, Any],
    given: str | None,
    includes_request: bool = False,
) -> str | None:
    """The effect key to record: the business key's, else one that includes the request when
    asked for, else the caller's `effect_key` (None: `run_id:step_id`)."""
    derived = derived_key(policy, request, given)
    if derived is not None or not includes_request:
        return derived or given
    if given is not None:
        raise ValidationFailed(
            "A key that includes the request is made from run_id and step_id: send no "
            "effect_key with key_includes_request.",
            {"effect_key": "not allowed with key_includes_request"},
        )
    if len(run_id) + len(step_id) > _MAX_POSITION:
        raise ValidationFailed(
            "run_id and step_id are too long for a key that includes the request.",
            {"step_id": f"run_id and step_id together at most {_MAX_POSITION} characters"},
        )
    return f"{run_id}:{step_id}:{digests.request_key(policy.name, request)}"


def derived_key(policy: Policy, request: dict[str, Any], given: str | None) -> str | None:
    """The effect key the tool's business key gives `request`; None for a tool without one.
    A tool with one refuses a key chosen by the caller, and a request lacking a key field."""
    if not policy.key_fields:
        return None
    if given is not None:
        raise ValidationFailed(
            f"Tool {policy.name!r} derives its effect keys from its business key "
            f"({', '.join(policy.key_fields)}); send no effect_key.",
            {"effect_key": "not allowed for a tool with key_fields"},
        )
    missing = {
        f"request.{path}": "required: part of the tool's business key"
        for path in policy.key_fields
        if value_at(request, path) is None
    }
    if missing:
        raise ValidationFailed(
            f"The request lacks a field of tool {policy.name!r}'s business key.", missing
        )
    return digests.business_key(policy.name, [value_at(request, p) for p in policy.key_fields])
