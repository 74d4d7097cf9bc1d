"""DBOS adapter (written against dbos 3.4): a DBOS step guarded by the ledger.

    from ledger_client import current_effect
    from ledger_client.adapters.dbos import ledger_step

    @ledger_step(tool="charge_card", target="{account}")
    def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
        key = current_effect().idempotency_key
        return payments.post("/charges", json={...}, headers={"Idempotency-Key": key}).json()

    @DBOS.workflow()
    def checkout(amount: str) -> dict[str, Any]:
        return charge_card(amount, "EUR", "acct_1")

Identity. The effect is recorded under `run_id` = the DBOS workflow id and `call_id` = the
step id (`DBOS.workflow_id`, `DBOS.step_id`, read inside the step). DBOS numbers a workflow's
steps deterministically, so a workflow recovered after a crash asks the ledger for the same
effect again, and the ledger answers with what it knows instead of letting it run twice.
Called outside a workflow, or inside another step (where DBOS runs a step as a plain function),
a ledger step raises `TypeError` before anything is written.

Holds are waited out, not raised. The guard runs with `wait=True`: an effect awaiting an
operator's approval, or one in doubt or in flight under a dead worker's lease, is long-polled on
the ledger inside the step until it resolves. An exception leaving a step is checkpointed by
DBOS as that step's outcome and replayed on every recovery, so raising `ApprovalPending` would
end the workflow for good while the operator had not even decided yet.

A lost lease is asked about again. When the step's function ran but its lease ran out before
the outcome was reported (`LeaseLost`: a call slower than the lease), the guard is called again
under the same step id and waits for the ledger to settle the effect, instead of letting DBOS
checkpoint `LeaseLost` as the step's outcome while the provider may have done it.

Retries. `retries_allowed=True` turns on DBOS's step retries; the adapter's `should_retry`
keeps them to what may help (the ledger unreachable, a limit that may clear or a halt that may
be resumed, an upstream effect not yet confirmed, the function's own errors) and never retries
a refusal that is final (a closed effect, a key conflict, exhausted attempts, bad input). A
retry can never repeat a charge: it is the same step id, hence the same effect, and the guard
returns the recorded response or waits on the ledger while the first attempt's fate is unknown.

`ledger_step` is `@DBOS.step()` over `dbos_identity` over `@guarded(wait=True)`; the same
composition can be written by hand (`@DBOS.step()`, then `@dbos_identity`, then
`@guarded(tool=..., wait=True)`) to pass DBOS options this module does not forward.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast

from dbos import DBOS

from ledger_client.aio import AsyncLedger
from ledger_client.config import LedgerConfig
from ledger_client.context import bind_step
from ledger_client.errors import (
    Blocked,
    Halted,
    LeaseLost,
    LedgerClientError,
    LedgerUnavailable,
    LimitExceeded,
    NotSent,
)
from ledger_client.guard import guarded
from ledger_client.sync import Ledger

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E", bound=BaseException)

__all__ = ["dbos_identity", "ledger_step", "should_retry", "step_identity"]

# What a later attempt may not meet: the ledger unreachable (nothing was run), a limit that may
# clear or a halt that may be resumed, an upstream effect not confirmed yet, a call the function
# itself says never reached the provider (`NotSent`: the effect is planned again).
TRANSIENT: tuple[type[LedgerClientError], ...] = (
    LedgerUnavailable,
    LimitExceeded,
    Halted,
    Blocked,
    NotSent,
)


def step_identity() -> tuple[str, str]:
    """(workflow id, step id) of the DBOS step running now; `TypeError` outside one."""
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    if not workflow_id or step_id is None:
        raise TypeError(
            "No run identity for a ledger-guarded DBOS step: call it from a DBOS workflow "
            "(outside one, DBOS runs a step as a plain function, with no workflow or step id)."
        )
    return workflow_id, str(step_id)


def dbos_identity(fn: Callable[P, R]) -> Callable[P, R]:
    """Bind the running DBOS step's identity (`bind_step(workflow id, step id)`) around `fn`,
    a guarded function: write it between `@DBOS.step()` and `@guarded(...)`."""
    if inspect.iscoroutinefunction(fn):
        afn = cast(Callable[..., Awaitable[Any]], fn)

        @functools.wraps(fn)
        async def abound(*args: Any, **kwargs: Any) -> Any:
            with bind_step(*step_identity()):
                return await afn(*args, **kwargs)

        return cast(Callable[P, R], abound)

    @functools.wraps(fn)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        with bind_step(*step_identity()):
            return fn(*args, **kwargs)

    return bound


# How often a step whose outcome report found its lease lost asks the ledger again.
LOST_LEASE_ASKS = 3


def _asked_again_after_a_lost_lease(guard: Callable[P, R]) -> Callable[P, R]:
    """`guard`, called again when it raises `LeaseLost`: the function ran, but its lease ran
    out first (a call slower than the lease), so its outcome was not recorded. Called again
    under the same step identity, the guard meets the effect in doubt, waits for the ledger to
    settle it (a lookup finds the charge) and returns the recorded result, or runs the function
    if the ledger proved it never arrived. Raised as it was, `LeaseLost` would be checkpointed
    as the step's outcome for good, whatever the provider did."""
    if inspect.iscoroutinefunction(guard):
        aguard = cast(Callable[..., Awaitable[Any]], guard)

        @functools.wraps(guard)
        async def acall(*args: Any, **kwargs: Any) -> Any:
            for _ in range(LOST_LEASE_ASKS):
                try:
                    return await aguard(*args, **kwargs)
                except LeaseLost:
                    continue
            return await aguard(*args, **kwargs)

        return cast(Callable[P, R], acall)

    @functools.wraps(guard)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        for _ in range(LOST_LEASE_ASKS):
            try:
                return guard(*args, **kwargs)
            except LeaseLost:
                continue
        return guard(*args, **kwargs)

    return call


def should_retry(error: BaseException) -> bool:
    """DBOS's retry predicate for a guarded step (used when `retries_allowed`): yes for the
    function's own errors and for `TRANSIENT` refusals; no for bad input (`TypeError`) and for
    every other answer of the ledger, which a retry would only get again (a closed effect, a
    key conflict, exhausted attempts, a hold still unresolved after `wait_timeout`)."""
    if isinstance(error, TRANSIENT):
        return True
    return not isinstance(error, (LedgerClientError, TypeError))


def _not_nested(label: str) -> None:
    if DBOS.step_id is not None:
        raise TypeError(
            f"{label} was called inside another DBOS step, where DBOS runs it as a plain "
            "function under the enclosing step's id (two such calls would be one effect): "
            "call it from the workflow function."
        )


def _from_the_workflow(fn: Callable[P, R], step: Callable[P, R], label: str) -> Callable[P, R]:
    """`step`, refused (`TypeError`, before anything is written) when called inside a step."""
    if inspect.iscoroutinefunction(fn):
        astep = cast(Callable[..., Awaitable[Any]], step)

        @functools.wraps(step)
        async def acall(*args: Any, **kwargs: Any) -> Any:
            _not_nested(label)
            return await astep(*args, **kwargs)

        return cast(Callable[P, R], acall)

    @functools.wraps(step)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        _not_nested(label)
        return step(*args, **kwargs)

    return call


def ledger_step(
    tool: str,
    *,
    target: str | Callable[[dict[str, Any]], str] | None = None,
    provider_ref: Callable[[Any], str] | None = None,
    ledger: Ledger | AsyncLedger | LedgerConfig | None = None,
    wait_timeout: float = 3600.0,
    name: str | None = None,
    retries_allowed: bool = False,
    interval_seconds: float = 1.0,
    max_attempts: int = 3,
    backoff_rate: float = 2.0,
    retry_if: Callable[[BaseException], bool] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A DBOS step whose side effect goes through the ledger (see the module docstring).

    `tool`, `target`, `provider_ref`, `ledger` and `wait_timeout` are `guarded`'s (the guard
    always waits: `wait=True`); `name`, `retries_allowed`, `interval_seconds`, `max_attempts`
    and `backoff_rate` are `DBOS.step()`'s. `retry_if` narrows DBOS's retries further: an
    exception is retried when both `should_retry` and `retry_if` say so."""

    def retry(error: BaseException) -> bool:
        return should_retry(error) and (retry_if is None or retry_if(error))

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        guard = guarded(
            tool,
            target=target,
            ledger=ledger,
            provider_ref=provider_ref,
            wait=True,
            wait_timeout=wait_timeout,
        )(fn)
        step = DBOS.step(
            name=name,
            retries_allowed=retries_allowed,
            interval_seconds=interval_seconds,
            max_attempts=max_attempts,
            backoff_rate=backoff_rate,
            should_retry=retry,
        )(dbos_identity(_asked_again_after_a_lost_lease(guard)))
        return _from_the_workflow(fn, step, name or fn.__qualname__)

    return decorate
