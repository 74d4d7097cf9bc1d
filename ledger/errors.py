"""Refusals the API turns into its documented JSON errors (docs/api.md#errors)."""

from __future__ import annotations

from typing import Any


class LedgerError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "detail": self.detail, **self.extra}

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries besides the body (429's Retry-After)."""
        return {}


class Forbidden(LedgerError):
    """The caller may not do this at all (a test agent naming a live tool)."""

    status, code = 403, "forbidden"


class NotFound(LedgerError):
    status, code = 404, "not_found"


class ValidationFailed(LedgerError):
    status, code = 422, "validation_error"

    def __init__(self, detail: str, fields: dict[str, str]) -> None:
        super().__init__(detail, fields=fields)


class Refused(LedgerError):
    """A 409: the ledger's state does not allow what was asked."""

    status = 409


class InvalidTransition(Refused):
    code = "invalid_transition"


class StaleLease(Refused):
    code = "stale_lease"


class Blocked(Refused):
    code = "blocked"


class AttemptsExhausted(Refused):
    code = "attempts_exhausted"


class EffectKeyConflict(Refused):
    code = "effect_key_conflict"


class HasActiveDependents(Refused):
    code = "has_active_dependents"


class Halted(Refused):
    """An active halt covers the effect: it may not be claimed (`halt`: scope, reason, by…)."""

    code = "halted"


class OperatorDecided(Refused):
    """An operator decided this effect (a compensation, say): only an operator or the ledger
    acts on it, never the agent it is recorded under."""

    code = "operator_decided"


class CompensationLimitReached(Refused):
    """The agent has recorded as many compensations of this effect as the compensating tool
    allows (`compensations_per_parent`)."""

    code = "compensation_limit_reached"
