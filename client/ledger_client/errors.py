"""What can go wrong when an agent asks the ledger for permission, as distinct exception types."""

from __future__ import annotations

from typing import Any


class LedgerClientError(Exception):
    """Base of every exception this client raises."""


class LedgerUnavailable(LedgerClientError):
    """The ledger did not answer (transport errors or 503) after every retry."""


class LedgerRequestError(LedgerClientError):
    """The ledger refused a request with an error this client has no dedicated type for."""

    def __init__(self, status: int, code: str, detail: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.body = body


class EffectRefused(LedgerClientError):
    """The effect may not be executed now. `effect` is the ledger's view when it sent one."""

    def __init__(self, message: str, effect: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.effect = effect


class Blocked(EffectRefused):
    """An upstream effect in `depends_on` is not confirmed yet; try again later."""

    def __init__(self, message: str, blocked_by: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.blocked_by = blocked_by


class AttemptsExhausted(EffectRefused):
    """Every attempt the tool allows has been used; only an operator can decide now."""


class NeedsReview(EffectRefused):
    """The effect is in flight elsewhere or its fate is uncertain (`unknown`, `dispatching`
    under another claim, `awaiting_confirmation`): running it again could duplicate it, so the
    ledger's reconciliation or an operator must resolve it first. `status` says which."""

    def __init__(self, message: str, status: str, effect: dict[str, Any] | None = None) -> None:
        super().__init__(message, effect)
        self.status = status


class EffectClosed(EffectRefused):
    """The effect already ended without success (`failed`, `cancelled`, `compensated`); the
    same effect key cannot run again. Use a new step id or effect key for a new attempt."""

    def __init__(self, message: str, status: str, effect: dict[str, Any] | None = None) -> None:
        super().__init__(message, effect)
        self.status = status


class EffectKeyConflict(EffectRefused):
    """The effect key was already used for a different request."""


class Halted(EffectRefused):
    """An operator halted claims of this effect (its tool, agent or run, or everything): do
    not execute it now. `halt` says what is halted, why, by whom and since when."""

    def __init__(self, message: str, halt: dict[str, Any]) -> None:
        super().__init__(message)
        self.halt = halt


class ApprovalPending(EffectRefused):
    """The effect's amount is above its tool's approval threshold: it waits for an operator's
    approval (four-eyes) and must not be executed yet. `effect_id` names it for
    `Ledger.wait_for_approval`, which returns once an operator has decided."""

    def __init__(self, message: str, effect_id: str, effect: dict[str, Any] | None = None) -> None:
        super().__init__(message, effect)
        self.effect_id = effect_id


class LimitExceeded(EffectRefused):
    """A limit of the tool or the agent (claims per minute, amount per 24 h) refused the claim:
    nothing was counted and the effect is still planned. Try again after `retry_after` seconds;
    `limit` says which limit, its current value and its maximum."""

    def __init__(self, message: str, retry_after: int, limit: dict[str, Any]) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit


class LeaseLost(LedgerClientError):
    """Our lease expired or was taken over, so our outcome was not recorded as the effect's
    state (the ledger keeps it as a late report). Recovery decides what happens next."""


class LeaseTooShort(LedgerClientError):
    """Less of the lease is left than the provider call may take (`call_timeout`), so the call
    was not started and the effect was reported `not_sent`: a call outliving its lease could
    run alongside another worker's retry, since fencing stops outcome writes, not calls."""


class OutcomeMissing(LedgerClientError):
    """An effect block ended cleanly without reporting an outcome; it was recorded `unknown`."""


class UsageError(LedgerClientError):
    """The handle was used in a way that cannot be right (two outcomes, an outcome on a replay)."""
