"""What the served OpenAPI document declares beyond what the models generate (docs/api.md,
"What the schema declares"): the rules the server checks on every input that no single model
states. A request the document allows is not refused for a reason it does not state.

- Strings: no NUL character (PostgreSQL cannot store one); the middleware refuses it in a URL,
  `inputs.check_json` in a body. Every string of a request body, path or query says so.
- Free JSON (`request`, `response`, `error`, provenance): `JsonValue` and `JsonObject`, with
  the number range of `inputs.check_json` and the NUL rule for strings and keys.
- `callback_url`: a `pattern` made from the allow-list (`LEDGER_CALLBACK_ALLOW`, parsed by
  `callbacktargets`), read when the document is generated; with none, only null.
- `POST /effects`: no `effect_key` with `key_includes_request`.
- Media type: a body is JSON (`application/json`); anything else is 415. And it is an object.
"""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest
from ninja import NinjaAPI

from ledger.api.callbacktargets import DEFAULT_PORTS, Target
from ledger.api.inputs import MAX_DIGITS, MAX_EXPONENT
from ledger.api.notifications import allowed_targets
from ledger.errors import LedgerError, ValidationFailed

NO_NUL = "^[^\\u0000]*$"
_COMPONENTS = "#/components/schemas/"
# A number the ledger stores: below 10^MAX_EXPONENT in magnitude, and zero or at least
# 10^-MAX_EXPONENT (check_json).
_NUMBER = {
    "type": "number",
    "exclusiveMinimum": -float(f"1e{MAX_EXPONENT}"),
    "exclusiveMaximum": float(f"1e{MAX_EXPONENT}"),
    "not": {
        "anyOf": [
            {"exclusiveMinimum": 0, "exclusiveMaximum": float(f"1e-{MAX_EXPONENT}")},
            {"exclusiveMinimum": -float(f"1e-{MAX_EXPONENT}"), "exclusiveMaximum": 0},
        ]
    },
}
JSON_COMPONENTS: dict[str, Any] = {
    "JsonValue": {
        "description": (
            "Any JSON value the ledger can store: strings and keys without NUL (or unpaired "
            f"surrogates), numbers of magnitude below 1e{MAX_EXPONENT} and, unless zero, at "
            f"least 1e-{MAX_EXPONENT}, with at most {MAX_DIGITS} significant digits, nested "
            "at most 32 deep."
        ),
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            _NUMBER,
            {"type": "string", "pattern": NO_NUL},
            {"type": "array", "items": {"$ref": _COMPONENTS + "JsonValue"}},
            {"$ref": _COMPONENTS + "JsonObject"},
        ],
    },
    "JsonObject": {
        "description": "A JSON object the ledger can store (see JsonValue).",
        "type": "object",
        "propertyNames": {"pattern": NO_NUL},
        "additionalProperties": {"$ref": _COMPONENTS + "JsonValue"},
    },
}


# A callback URL's path segment (callbacktargets.parse): RFC 3986 characters, percent-escapes
# other than of ".", "/" and "\\", and neither "." nor "..".
_CHAR = r"[A-Za-z0-9\-_~!$&'()*+,;=:@]"
_ESCAPE = r"%(?:[013-46-9A-Fa-f][0-9A-Fa-f]|2[0-9A-Da-d]|5[0-9ABabD-Fd-f])"
_UNIT = f"(?:{_CHAR}|{_ESCAPE})"
_SEGMENT = f"(?:(?:{_UNIT}|\\.)*{_UNIT}(?:{_UNIT}|\\.)*|\\.{{3,}})?"
_QUERY = r"(?:\?(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*)?"


def _anycase(text: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in text)


def _target_pattern(entry: Target) -> str:
    """The callback URLs one allow-list entry admits, as callbacktargets.permitted reads them."""
    digits = str(entry.port)
    port = f":0{{0,{5 - len(digits)}}}{digits}"
    if entry.port == DEFAULT_PORTS[entry.scheme]:
        port = f"(?:{port})?"
    prefix = entry.path
    if prefix in ("", "/"):
        path = f"(?:/{_SEGMENT})*"
    elif prefix.endswith("/"):
        path = f"{re.escape(prefix)}{_SEGMENT}(?:/{_SEGMENT})*"
    else:
        path = f"{re.escape(prefix)}(?:/{_SEGMENT})*"
    return f"{_anycase(entry.scheme)}://{_anycase(entry.host)}{port}{path}{_QUERY}"


def _callback_url(intent: dict[str, Any]) -> None:
    field = intent.get("properties", {}).get("callback_url")
    if field is None:
        return
    targets = allowed_targets()
    if not targets:
        field.pop("anyOf", None)
        field.update(type="null", description="No callback URL is allowed here (none listed).")
        return
    for branch in field.get("anyOf", []):
        if branch.get("type") == "string":
            branch["pattern"] = f"^(?:{'|'.join(_target_pattern(t) for t in targets)})$"
    field["description"] = "Under an origin or URL prefix of the deployment's allow-list."


def _one_key(intent: dict[str, Any]) -> None:
    if "key_includes_request" in intent.get("properties", {}):
        both = {"effect_key": {"type": "string"}, "key_includes_request": {"const": True}}
        intent["not"] = {"required": list(both), "properties": both}


class UnsupportedMediaType(LedgerError):
    status, code = 415, "unsupported_media_type"


def check_media_type(request: HttpRequest) -> None:
    """A body must say it is JSON, as the schema declares; 415 otherwise."""
    kind = request.content_type or ""
    if request.body and kind != "application/json" and not kind.endswith("+json"):
        raise UnsupportedMediaType(
            "The body must be JSON, sent as Content-Type: application/json.",
            fields={"Content-Type": kind[:100] or "missing"},
        )


def check_object(data: Any) -> None:
    """Every body of the API is a JSON object; a number is not one with default fields."""
    if not isinstance(data, dict):
        raise ValidationFailed("The body must be a JSON object.", {"body": "must be an object"})


def _json_refs(node: Any) -> Any:
    """The schema with the models' `x-json` markers (schemas.JsonValue) made references."""
    if isinstance(node, list):
        return [_json_refs(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "x-json" in node:
        name = "JsonObject" if node["x-json"] == "object" else "JsonValue"
        rest = {k: v for k, v in node.items() if k != "x-json"}
        return {**rest, "$ref": _COMPONENTS + name}
    return {key: _json_refs(value) for key, value in node.items()}


def _no_nul(node: Any) -> None:
    """Every plain string schema under `node` (an input's) refuses NUL."""
    if isinstance(node, list):
        for item in node:
            _no_nul(item)
    elif isinstance(node, dict):
        plain = not ({"format", "enum", "const", "pattern"} & node.keys())
        if node.get("type") == "string" and plain:
            node["pattern"] = NO_NUL
        for value in node.values():
            _no_nul(value)


def _inputs(schema: dict[str, Any]) -> set[str]:
    """The components request bodies name, and those they name in turn."""
    components = schema.get("components", {}).get("schemas", {})
    found: set[str] = set()
    pending = [
        op.get("requestBody", {}) for path in schema["paths"].values() for op in path.values()
    ]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            name = ref.removeprefix(_COMPONENTS)
            if ref.startswith(_COMPONENTS) and name not in found and name in components:
                found.add(name)
                pending.append(components[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found


def declare(schema: dict[str, Any]) -> dict[str, Any]:
    """The generated document with the rules above declared."""
    schema = _json_refs(schema)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(JSON_COMPONENTS)
    if "IntentIn" in components:
        _callback_url(components["IntentIn"])
        _one_key(components["IntentIn"])
    for name in _inputs(schema):
        _no_nul(components[name])
    for path in schema["paths"].values():
        for operation in path.values():
            _no_nul(operation.get("parameters", []))
    return schema


class LedgerAPI(NinjaAPI):
    """The agent API, whose served document declares what the server checks."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        declared = declare(dict(schema))
        schema.clear()
        schema.update(declared)
        return schema
