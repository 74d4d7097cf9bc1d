"""What the MCP proxy (`ledger_client.adapters.mcp`) reads of an upstream tool's input schema:
the defaults it declares, applied to a call's arguments, and the problems it finds in them.

The defaults are applied before the call is recorded, and the same arguments go upstream: what
the ledger records is what the upstream is asked to do, so a tool whose `currency` defaults to
"EUR" is recorded with `"currency": "EUR"` (which the ledger's limits and four-eyes need) even
when the client left it out.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from ledger_client.canonical import canonical

# How deep nested objects get their defaults (and `$ref`s are followed): far past any real tool.
_DEPTH = 32


def with_defaults(
    schema: Mapping[str, Any], arguments: Mapping[str, Any], skip: Collection[str] = ()
) -> dict[str, Any]:
    """`arguments` with the schema's `default` of every property they leave out, at the top
    level and in nested objects the arguments hold (local `$ref`s followed), canonical. The
    names in `skip` (the proxy's own key argument) get no default."""
    filled = _fill(schema, dict(arguments), schema, 0)
    out = dict(filled) if isinstance(filled, dict) else dict(arguments)
    for name in skip:
        if name not in arguments:
            out.pop(name, None)
    return {name: canonical(value, f"argument {name!r}") for name, value in out.items()}


def _resolve(node: Any, root: Mapping[str, Any]) -> Any:
    """`node` with a local `$ref` ("#/$defs/Note") or a single `allOf` member followed."""
    for _ in range(_DEPTH):
        if not isinstance(node, Mapping):
            return node
        ref = node.get("$ref")
        members = node.get("allOf")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, Mapping) else None
            node = target
        elif isinstance(members, list) and len(members) == 1 and "properties" not in node:
            node = members[0]
        else:
            return node
    return node


def _fill(node: Any, value: Any, root: Mapping[str, Any], depth: int) -> Any:
    node = _resolve(node, root)
    if depth > _DEPTH or not isinstance(node, Mapping) or not isinstance(value, dict):
        return value
    properties = node.get("properties")
    if not isinstance(properties, Mapping):
        return value
    out = dict(value)
    for name, declared in properties.items():
        if name not in out:
            # A default may sit beside a `$ref` (pydantic: `{"$ref": …, "default": …}`).
            for candidate in (declared, _resolve(declared, root)):
                if isinstance(candidate, Mapping) and "default" in candidate:
                    out[name] = copy.deepcopy(candidate["default"])
                    break
        if name in out:
            out[name] = _fill(declared, out[name], root, depth + 1)
    return out


def schema_problem(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with `arguments` under the upstream tool's input schema, or None."""
    # jsonschema ships no type information; it is a dependency of the `mcp` package.
    from jsonschema import exceptions, validators  # type: ignore[import-untyped]

    try:
        validator = validators.validator_for(schema)(schema)
        error = exceptions.best_match(validator.iter_errors(dict(arguments)))
    except exceptions.SchemaError:
        return None  # the upstream's schema is broken: the upstream judges for itself
    return None if error is None else str(error.message)
