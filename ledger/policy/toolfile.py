"""Reading tool declarations from TOML (`manage.py loadtools FILE.toml`).

[tools.charge_card]
preset = "idempotent"        # read_only | idempotent | lookup | unsafe
has_lookup = true            # capabilities may be combined with a preset
key_ttl = "24h"
confirm_within = "15m"
compensated_by = "refund_card"
mode = "live"                # or "test": only test tools may be named by a test agent
limit_claims_per_minute = 60 # limits (ledger.rules.limits) need amount_path and currency_path
limit_amount_per_day = { EUR = "5000.00" }
amount_path = "amount"       # dotted paths into the request
currency_path = "currency"
approve_above = "1000.00"    # four-eyes (ledger.rules.four_eyes): needs limit_amount_per_day
key_fields = ["order_id"]    # business key (ledger.effects.businesskeys): one effect per order_id

[tools.refund_card]
compensations_per_parent = 3 # partial refunds: an agent may record up to 3 per charge (1)

[tools.create_ticket]                # the provider's own record (README "The provider's record")
preset = "lookup"
call_timeout = "30s"          # the longest one provider call may take
search_lag = "1m"             # how long a new request may be missing from the search
settle_after = "2m"           # ≥ call_timeout + search_lag
lookup_proves_absence = true  # the search is complete for requests older than settle_after …
lookup_horizon = "30d"        # … and younger than this
statements = true             # statements may be imported (needs amount_path, currency_path,
amount_unit = "major"         #   amount_unit); columns and statuses may be mapped:
statement_columns = { provider_ref = "id" }
statement_status = { paid = "succeeded" }
statement_reference = "idempotency_key"  # or "effect_id": what the `reference` column holds
statement_skew = "5m"         # clock difference allowed around a dispatch window
statement_format = ""         # or a provider's own report, e.g. "stripe_itemized_balance_change"
halt_on_duplicate = true      # a duplicate found at the provider halts the tool
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from config.env import parse_duration
from ledger.models import Mode, Tool
from ledger.policy.money import amount_limits, required_paths, threshold
from ledger.policy.tools import PRESETS

_FLAGS = (
    "read_only",
    "honours_key",
    "has_lookup",
    "lookup_proves_absence",
    "statements",
    "fetch_statements",
    "halt_on_duplicate",
)
_DURATIONS = (
    "key_ttl",
    "confirm_within",
    "settle_after",
    "escalate_after",
    "resolve_within",
    "backoffice_window",
    "retention",
    "call_timeout",
    "search_lag",
    "lookup_horizon",
    "statement_skew",
)
_TEXT = (
    "description",
    "compensated_by",
    "reconciler",
    "webhook_provider",
    "amount_path",
    "currency_path",
    "amount_unit",
    "statement_format",
)
_LISTS = ("card_scan_allow", "redact_paths", "key_fields")
_MAPS = ("statement_columns", "statement_status")
_KNOWN = {
    "preset",
    "max_attempts",
    "compensations_per_parent",
    "reconciler_config",
    "mode",
    "limit_claims_per_minute",
    "limit_amount_per_day",
    "approve_above",
    "statement_reference",
    *_FLAGS,
    *_DURATIONS,
    *_TEXT,
    *_LISTS,
    *_MAPS,
}
# A provider that honours keys but did not say for how long is assumed to keep them a day.
_DEFAULT_KEY_TTL = timedelta(hours=24)
# Clock difference allowed between a provider's statement and the ledger, unless declared.
_DEFAULT_STATEMENT_SKEW = timedelta(minutes=5)
# A statement's columns (`ledger.statements`), and the line statuses its status maps onto.
STATEMENT_COLUMNS = frozenset(
    {"provider_ref", "reference", "amount", "currency", "status", "occurred_at", "type"}
)
LINE_STATUSES = frozenset({"succeeded", "failed", "pending"})
REFERENCES = ("idempotency_key", "effect_id")


class ToolFileError(ValueError):
    pass


# Checks the ledger cannot make itself: what a tool's adapter can do (an app that knows the
# adapters registers them, `reconcilers.providers.checks.check_tool`). Each takes the tool's
# name and its parsed fields and returns what is wrong, or "".
ADAPTER_CHECKS: list[Callable[[str, dict[str, Any]], str]] = []


def _count(name: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100:
        raise ToolFileError(f"tool {name!r}: {key} must be an integer from 1 to 100")
    return value


def _fields(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    unknown = set(spec) - _KNOWN
    if unknown:
        raise ToolFileError(f"tool {name!r}: unknown settings {sorted(unknown)}")
    preset = spec.get("preset", "unsafe")
    if preset not in PRESETS:
        raise ToolFileError(
            f"tool {name!r}: preset must be one of {sorted(PRESETS)}, not {preset!r}"
        )
    fields: dict[str, Any] = dict(PRESETS[preset])
    _flags_and_durations(name, spec, fields)
    if fields["call_timeout"] is not None and fields["call_timeout"] > timedelta(hours=1):
        # A claim's lease is at most an hour, and it must outlast any call started on it.
        raise ToolFileError(f"tool {name!r}: call_timeout must be at most 1h")
    if fields["honours_key"] and fields["key_ttl"] is None:
        fields["key_ttl"] = _DEFAULT_KEY_TTL
    for key in _TEXT:
        value = spec.get(key, "")
        if not isinstance(value, str) or len(value) > 500:
            raise ToolFileError(f"tool {name!r}: {key} must be a short string")
        fields[key] = value
    for key in _LISTS:
        value = spec.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ToolFileError(f"tool {name!r}: {key} must be a list of strings")
        fields[key] = value
    _key_fields(name, fields["key_fields"])
    fields["max_attempts"] = _count(
        name, "max_attempts", spec.get("max_attempts", settings.LEDGER_DEFAULT_MAX_ATTEMPTS)
    )
    fields["compensations_per_parent"] = _count(
        name, "compensations_per_parent", spec.get("compensations_per_parent", 1)
    )
    config = spec.get("reconciler_config", {})
    if not isinstance(config, dict):
        raise ToolFileError(f"tool {name!r}: reconciler_config must be a table")
    fields["reconciler_config"] = config
    mode = spec.get("mode", Mode.LIVE)
    if mode not in Mode.values:
        raise ToolFileError(f"tool {name!r}: mode must be one of {sorted(Mode.values)}")
    fields["mode"] = mode
    _limits(name, spec, fields)
    _approval(name, spec, fields)
    _absence(name, fields)
    _statements(name, spec, fields)
    for check in ADAPTER_CHECKS:
        problem = check(name, fields)
        if problem:
            raise ToolFileError(f"tool {name!r}: {problem}")
    return fields


_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*")


def _key_fields(name: str, paths: list[str]) -> None:
    """A business key: at most 10 distinct dotted paths into the request."""
    if len(paths) > 10 or len(set(paths)) != len(paths):
        raise ToolFileError(f"tool {name!r}: key_fields must be at most 10 distinct paths")
    for path in paths:
        if len(path) > 200 or not _PATH.fullmatch(path):
            raise ToolFileError(
                f'tool {name!r}: key_fields: {path!r} is not a dotted path such as "order.id"'
            )


def _flags_and_durations(name: str, spec: dict[str, Any], fields: dict[str, Any]) -> None:
    for flag in _FLAGS:
        if flag in spec:
            if not isinstance(spec[flag], bool):
                raise ToolFileError(f"tool {name!r}: {flag} must be true or false")
            fields[flag] = spec[flag]
        fields.setdefault(flag, False)
    defaults = {
        "escalate_after": settings.LEDGER_ESCALATE_AFTER,
        "resolve_within": settings.LEDGER_RESOLVE_WITHIN,
        "backoffice_window": settings.LEDGER_BACKOFFICE_WINDOW,
        "retention": settings.LEDGER_RETENTION,
    }
    for key in _DURATIONS:
        raw = spec.get(key, defaults.get(key))
        try:
            fields[key] = None if raw is None else timedelta(seconds=parse_duration(raw))
        except ValueError as exc:
            raise ToolFileError(f"tool {name!r}: {key}: {exc}") from None


def _absence(name: str, fields: dict[str, Any]) -> None:
    """`lookup_proves_absence`: the provider's search is complete for requests older than
    settle_after, so a late enough not-found proves the request never arrived. Refused unless
    every bound that makes it true is declared."""
    if not fields["lookup_proves_absence"]:
        return
    missing = [
        key for key in ("call_timeout", "settle_after", "lookup_horizon") if fields[key] is None
    ]
    if not fields["has_lookup"]:
        raise ToolFileError(f"tool {name!r}: lookup_proves_absence needs has_lookup")
    if missing:
        raise ToolFileError(f"tool {name!r}: lookup_proves_absence needs {', '.join(missing)}")
    lag = fields["search_lag"] or timedelta(0)
    if fields["settle_after"] < fields["call_timeout"] + lag:
        raise ToolFileError(
            f"tool {name!r}: settle_after must be at least call_timeout + search_lag "
            f"({fields['call_timeout'] + lag}) for a not-found to prove absence"
        )
    if fields["lookup_horizon"] <= fields["settle_after"]:
        raise ToolFileError(f"tool {name!r}: lookup_horizon must be longer than settle_after")


def _statements(name: str, spec: dict[str, Any], fields: dict[str, Any]) -> None:
    for key in _MAPS:
        value = spec.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and 0 < len(v) <= 100
            for k, v in value.items()
        ):
            raise ToolFileError(f"tool {name!r}: {key} must be a table of short strings")
        fields[key] = value
    if set(fields["statement_columns"]) - STATEMENT_COLUMNS:
        unknown = sorted(set(fields["statement_columns"]) - STATEMENT_COLUMNS)
        raise ToolFileError(
            f"tool {name!r}: statement_columns maps unknown columns {unknown}; "
            f"the columns are {sorted(STATEMENT_COLUMNS)}"
        )
    if set(fields["statement_status"].values()) - LINE_STATUSES:
        raise ToolFileError(
            f"tool {name!r}: statement_status maps onto {sorted(LINE_STATUSES)} only"
        )
    reference = spec.get("statement_reference", REFERENCES[0])
    if reference not in REFERENCES:
        raise ToolFileError(f"tool {name!r}: statement_reference must be one of {REFERENCES}")
    fields["statement_reference"] = reference
    if fields["amount_unit"] not in ("", "major", "minor"):
        raise ToolFileError(f'tool {name!r}: amount_unit must be "major" or "minor"')
    if fields["amount_unit"] == "minor" and (
        fields["limit_amount_per_day"] or fields["approve_above"] is not None
    ):
        # Limits and four-eyes thresholds read the request's amount in major units.
        raise ToolFileError(f"tool {name!r}: limits and approve_above need amount_unit major")
    if fields["statement_format"] and not fields["statements"]:
        raise ToolFileError(f"tool {name!r}: statement_format needs statements = true")
    if fields["fetch_statements"] and not fields["statements"]:
        raise ToolFileError(f"tool {name!r}: fetch_statements needs statements = true")
    if not fields["statements"]:
        return
    missing = [k for k in ("amount_path", "currency_path", "amount_unit") if not fields[k]]
    if missing:
        raise ToolFileError(f"tool {name!r}: a tool with statements must declare {missing}")
    if fields["statement_skew"] is None:
        fields["statement_skew"] = _DEFAULT_STATEMENT_SKEW


def _limits(name: str, spec: dict[str, Any], fields: dict[str, Any]) -> None:
    per_minute = spec.get("limit_claims_per_minute")
    if per_minute is not None and (
        not isinstance(per_minute, int) or isinstance(per_minute, bool) or per_minute < 1
    ):
        raise ToolFileError(f"tool {name!r}: limit_claims_per_minute must be a positive integer")
    fields["limit_claims_per_minute"] = per_minute
    raw = spec.get("limit_amount_per_day", {})
    try:
        amount_limits(raw)
    except ValueError as exc:
        raise ToolFileError(f"tool {name!r}: limit_amount_per_day: {exc}") from None
    # Stored as declared (exact decimal strings), with currency codes in capitals.
    fields["limit_amount_per_day"] = {cur.upper(): str(amount) for cur, amount in raw.items()}
    missing = required_paths({**spec, **fields})
    if missing:
        raise ToolFileError(
            f"tool {name!r}: a tool with limits must declare {' and '.join(missing)}"
        )
    for key in ("amount_path", "currency_path"):
        if fields[key] in fields["redact_paths"]:
            raise ToolFileError(f"tool {name!r}: {key} must not be in redact_paths")


def _approval(name: str, spec: dict[str, Any], fields: dict[str, Any]) -> None:
    raw = spec.get("approve_above")
    fields["approve_above"] = None
    if raw is None:
        return
    try:
        fields["approve_above"] = threshold(raw)
    except ValueError as exc:
        raise ToolFileError(f"tool {name!r}: approve_above {exc}") from None
    # An approval threshold bounds one effect, not a day of them: it needs the amount limit.
    if not fields["limit_amount_per_day"]:
        raise ToolFileError(f"tool {name!r}: approve_above needs limit_amount_per_day")


def load(path: Path) -> list[tuple[str, bool]]:
    """Create or update every tool in the file; returns (name, created) pairs. All or nothing."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ToolFileError(f"{path}: {exc}") from None
    tools = document.get("tools")
    if not isinstance(tools, dict) or not tools:
        raise ToolFileError(f"{path}: expected one or more [tools.NAME] tables")
    parsed = {}
    for name, spec in tools.items():
        if not isinstance(spec, dict):
            raise ToolFileError(f"tools.{name} must be a table")
        if len(name) > 100:
            raise ToolFileError(f"tool name {name[:20]!r}… is longer than 100 characters")
        parsed[name] = _fields(name, spec)
    results = []
    with transaction.atomic():
        for name, fields in parsed.items():
            _, created = Tool.objects.update_or_create(name=name, defaults=fields)
            results.append((name, created))
    return results
