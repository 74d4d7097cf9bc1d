"""Checks on parsed JSON that no schema can express (what PostgreSQL cannot store, and sizes),
and an agent's intent as the ledger records it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ledger.effects.businesskeys import effect_key_for
from ledger.effects.intents import Intent
from ledger.errors import ValidationFailed
from ledger.jsonenc import OversizedNumber
from ledger.policy.redaction import SHOWN, scrub_cards
from ledger.policy.tools import Policy

MAX_DEPTH = 32
# Exponents beyond this are refused: canonicalising 1e999999 would build a million-digit string.
MAX_EXPONENT = 100
# Digits beyond this are refused: no amount needs them, and PostgreSQL's numeric (inside jsonb)
# overflows at 16,384 digits after the point.
MAX_DIGITS = 100


def _problem_with_string(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired surrogate"
    return None


def _refuse(detail: str, path: str, problem: str) -> ValidationFailed:
    # The field is named as the body spelled it, so it is cut and its card numbers tokenized:
    # a key is anything the caller chose to send.
    shown = scrub_cards(path[: SHOWN * 3]) if path else "body"
    return ValidationFailed(detail, {shown: problem})


def _number_problem(value: Any) -> str | None:
    if isinstance(value, OversizedNumber):
        return value.problem
    if isinstance(value, Decimal):
        # Below 10^MAX_EXPONENT in magnitude, as an integer of at most MAX_DIGITS digits is,
        # and not below 10^-MAX_EXPONENT (the served schema's JsonValue says both).
        if not value.is_finite() or not -MAX_EXPONENT <= value.adjusted() < MAX_EXPONENT:
            return "number out of range"
        if len(value.as_tuple().digits) > MAX_DIGITS:
            return f"more than {MAX_DIGITS} digits"
    elif isinstance(value, int) and not isinstance(value, bool):
        # At most jsonenc.MAX_NUMBER_CHARS digits by now, so str() is cheap.
        digits = len(str(abs(value)))
        return f"more than {MAX_DIGITS} digits" if digits > MAX_DIGITS else None
    return None


def check_json(value: Any, path: str = "", depth: int = 0) -> None:
    """Raise `ValidationFailed` naming the first value PostgreSQL could not store."""
    if depth > MAX_DEPTH:
        raise _refuse("The body is nested too deeply.", path, f"deeper than {MAX_DEPTH}")
    if isinstance(value, str):
        problem = _problem_with_string(value)
        if problem:
            raise _refuse(f"A string {problem}.", path, problem)
    elif isinstance(value, (Decimal, int, OversizedNumber)):
        problem = _number_problem(value)
        if problem:
            too_long = problem.startswith("more than")
            detail = "A number has too many digits." if too_long else "A number is out of range."
            raise _refuse(detail, path, problem)
    elif isinstance(value, dict):
        for key, item in value.items():
            problem = _problem_with_string(key)
            if problem:
                raise _refuse(f"A key {problem}.", path, f"key {problem}")
            # Keys are cut as the path is built (only its first characters are ever shown), a
            # card tokenized before the cut so that none is cut into a prefix that survives.
            name = scrub_cards(str(key)[: SHOWN + 60])[:SHOWN]
            check_json(item, f"{path}.{name}" if path else name, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, f"{path}.{index}" if path else str(index), depth + 1)


def intent_of(payload: Any, policy: Policy) -> Intent:
    """The intent a `POST /effects` body (`schemas.IntentIn`) records: its effect key is the
    tool's business key, one that includes the request when asked for, or the caller's."""
    return Intent(
        run_id=payload.run_id,
        step_id=payload.step_id,
        tool=payload.tool,
        target=payload.target,
        request=payload.request,
        effect_key=effect_key_for(
            policy,
            payload.run_id,
            payload.step_id,
            payload.request,
            payload.effect_key,
            payload.key_includes_request,
        ),
        depends_on=payload.depends_on,
        provenance=payload.provenance.model_dump(exclude_none=True) if payload.provenance else {},
        callback_url=payload.callback_url or "",
    )
