"""What can go wrong when an agent asks the ledger for permission, as distinct exception types.
Every refusal keeps the ledger's answer (`refusal`, a `Refusal`) and, where there is one, the
effect as the ledger holds it (`effect`, an `EffectRecord`)."""

from __future__ import annotations

from typing import Any

from ledger_client.models import Approval, EffectRecord, Halt, Refusal, Upstream


def _restore(cls: type[LedgerClientError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


def _problems(refusal: Refusal) -> str:
    """The per-field problems of a refusal, as the end of its message ("" when there are none)."""
    if not refusal.fields:
        return ""
    return " " + "; ".join(f"{name}: {problem}" for name, problem in refusal.fields.items())


class LedgerClientError(Exception):
    """Base of every exception this client raises.

    Each one pickles as its class, `args` and attributes: durable workflow engines (DBOS)
    record an exception that left a step by pickling it and raise it again from their record,
    and the default pickling would call `EffectClosed(message)` without its status."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _restore, (type(self), self.args, dict(self.__dict__))


class LedgerNotConfigured(LedgerClientError, RuntimeError):
    """No ledger to ask: none was given to the guard, `ledger_client.configure(url, api_key)`
    was not called, and EFFECT_LEDGER_URL and EFFECT_LEDGER_API_KEY are not both set. A
    `RuntimeError` too, as it was before it had a type of its own."""


class LedgerUnavailable(LedgerClientError):
    """The ledger did not answer (transport errors or 503) after every retry it was safe to
    make. Nothing the caller guards was run."""


class LedgerRequestError(LedgerClientError):
    """The ledger refused a request with an error this client has no dedicated type for.
    `fields` maps each field the ledger found wrong (a 422's `fields`, dotted for nested ones:
    `request.currency`) to what is wrong with it; the message lists them too."""

    def __init__(self, status: int, refusal: Refusal) -> None:
        super().__init__(f"{status} {refusal.error}: {refusal.detail}{_problems(refusal)}")
        self.status = status
        self.refusal = refusal

    @property
    def fields(self) -> dict[str, str]:
        return dict(self.refusal.fields or {})

    @property
    def code(self) -> str:
        return self.refusal.error

    @property
    def detail(self) -> str:
        return self.refusal.detail


class EffectRefused(LedgerClientError):
    """The effect may not be executed now. `effect` is the ledger's view when it sent one."""

    def __init__(self, message: str, effect: EffectRecord | None = None) -> None:
        super().__init__(message)
        self.effect = effect


class Blocked(EffectRefused):
    """An upstream effect in `depends_on` is not confirmed yet; try again later."""

    def __init__(self, message: str, blocked_by: list[Upstream]) -> None:
        super().__init__(message)
        self.blocked_by = blocked_by


class AttemptsExhausted(EffectRefused):
    """Every attempt the tool allows has been used; only an operator can decide now."""


class NeedsReview(EffectRefused):
    """The effect is in flight elsewhere or its fate is uncertain (`unknown`, `dispatching`
    under another claim, `awaiting_confirmation`): running it again could duplicate it, so the
    ledger's reconciliation or an operator must resolve it first. `status` says which. Do not
    retry it: wait for the ledger (`wait_for_change`) or ask `recover()`."""

    def __init__(self, message: str, status: str, effect: EffectRecord | None = None) -> None:
        super().__init__(message, effect)
        self.status = status


class EffectClosed(EffectRefused):
    """The effect already ended without success (`failed`, `cancelled`, `compensated`); the
    same effect key cannot run again."""

    def __init__(self, message: str, status: str, effect: EffectRecord | None = None) -> None:
        super().__init__(message, effect)
        self.status = status


class EffectKeyConflict(EffectRefused):
    """The effect key (or the tool's business key) was already used for a different request."""


class OperatorDecided(EffectRefused):
    """An operator decided this effect; its agent may read it but not act on it."""


class Halted(EffectRefused):
    """An operator halted claims of this effect (its tool, agent or run, or everything): do
    not execute it now. `halt` says what is halted, why, by whom and since when."""

    def __init__(self, message: str, halt: Halt | None) -> None:
        super().__init__(message)
        self.halt = halt


class ApprovalPending(EffectRefused):
    """The effect's amount is above its tool's approval threshold: it waits for an operator's
    approval (four-eyes) and must not be executed yet. `effect_id` names it for
    `wait_for_decision`, which returns once an operator has decided; `approval` is what a
    framework shows its user."""

    def __init__(self, message: str, effect_id: str, effect: EffectRecord | None = None) -> None:
        super().__init__(message, effect)
        self.effect_id = effect_id

    @property
    def approval(self) -> Approval | None:
        return Approval.of(self.effect) if self.effect is not None else None


class LimitExceeded(EffectRefused):
    """A limit of the tool or the agent refused the claim: nothing was counted and the effect
    is still planned. Try again after `retry_after` seconds; `limit` says which limit."""

    def __init__(self, message: str, retry_after: int, limit: Any) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit


class LeaseLost(LedgerClientError):
    """Our lease expired or was taken over, so our outcome was not recorded as the effect's
    state (the ledger keeps it as a late report). Recovery decides what happens next."""


class LeaseTooShort(LedgerClientError):
    """Less of the lease is left than the provider call may take (`call_timeout`), so the call
    was not started and the effect was reported `not_sent`."""


class OutcomeMissing(LedgerClientError):
    """An effect block ended cleanly without reporting an outcome; it was recorded `unknown`."""


class UsageError(LedgerClientError):
    """The handle was used in a way that cannot be right (two outcomes, an outcome on a replay)."""


class NotSent(LedgerClientError):
    """Raise it inside a guarded function (or an effect block) when the request certainly
    never reached the provider (it failed validation first, the provider refused it before
    doing anything): the effect is reported `not_sent` and goes back to `planned`, instead of
    `unknown`. Any other exception may follow a provider that acted."""

    def __init__(self, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.detail = detail
