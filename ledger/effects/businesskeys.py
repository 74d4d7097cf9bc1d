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
"""

from __future__ import annotations

from typing import Any

from ledger.containment.limits import value_at
from ledger.effects import digests
from ledger.errors import ValidationFailed
from ledger.policy.tools import Policy


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
