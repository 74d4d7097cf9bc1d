"""The handle an effect block or a guarded call works with: the ids to send to the provider,
and the outcome to report. `Effect` reports over the sync client, `AsyncEffect` over the async
one; what an outcome says, and what leaving a block without one means, is shared here.

The rule for leaving an effect block without an outcome:
* an exception escaped → the effect is reported `unknown` and the exception re-raised, unless
  it is `NotSent` (the request certainly never reached the provider): then `not_sent`. Nothing
  else counts as proof, because an exception raised after the request was written may follow
  a provider that acted.
* the block ended cleanly but reported nothing → `unknown` as well, then `OutcomeMissing`.
* an outcome is never `failed` unless the code said so with `fail(...)`: a timeout is not a
  failure.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx

from ledger_client import protocol
from ledger_client.errors import LeaseLost, LeaseTooShort, LedgerRequestError, NotSent, UsageError
from ledger_client.models import EffectRecord, Halt

if TYPE_CHECKING:
    from ledger_client.aio import AsyncTransport
    from ledger_client.behind import Reporter
    from ledger_client.heartbeat import Heartbeat
    from ledger_client.sync import Transport

Error = str | dict[str, Any]


def confirmed_without_response(record: EffectRecord) -> dict[str, Any]:
    """What a replay returns for an effect the ledger confirmed without the provider's answer
    (a statement line, an operator's decision): the provider's reference under `id`, as a
    provider's own answer has it, so that whoever reads the result learns what was done."""
    return {
        "id": record.provider_ref,
        "status": "confirmed",
        "effect_id": record.id,
        "note": "confirmed by the ledger from the provider's record; its answer was not recorded",
    }


class EffectHandle:
    """One claimed (or replayed) effect. `idempotency_key` is what the provider call must carry
    (an `Idempotency-Key` header): the same for every attempt of this effect. `replayed` is
    true when the ledger already holds it as `confirmed`: do not execute again, use `result`
    (the recorded response, redacted as the ledger stores it; `confirmed_without_response`'s
    note when the ledger confirmed it with no response, from a statement line, say)."""

    def __init__(
        self, record: EffectRecord, *, replayed: bool, heartbeat: Heartbeat | None = None
    ) -> None:
        self.record = record
        self.replayed = replayed
        self.heartbeat = heartbeat
        self.outcome: str | None = "confirmed" if replayed else None
        self.result: Any = None
        if replayed:
            self.result = record.response
            if record.response is None and record.provider_ref:
                self.result = confirmed_without_response(record)
        self._pending: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def idempotency_key(self) -> str:
        return self.record.idempotency_key

    @property
    def attempt(self) -> int:
        return self.record.attempt

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def lease_token(self) -> str | None:
        return self.record.lease_token

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat was refused: check before starting more provider work."""
        return self.heartbeat is not None and self.heartbeat.lost

    @property
    def halt(self) -> Halt | None:
        """The halt the latest heartbeat reported, or None: stop before sending anything more,
        and report `not_sent` if nothing went out."""
        return self.heartbeat.halt if self.heartbeat is not None else None

    def lease_left(self) -> float:
        """Seconds of the lease surely left (0 on a replay, or once it is lost)."""
        if self.heartbeat is None or self.heartbeat.lost:
            return 0.0
        return max(0.0, self.heartbeat.lease_until - time.monotonic())

    def __repr__(self) -> str:
        return f"<Effect {self.id} {self.status} attempt={self.attempt} replayed={self.replayed}>"

    @property
    def report_pending(self) -> bool:
        """An outcome report was attempted but did not get through (the ledger unreachable)."""
        return self._pending is not None

    def _body(self, outcome: dict[str, Any]) -> dict[str, Any]:
        if self.replayed:
            raise UsageError(f"Effect {self.id} was already confirmed; it is a replay.")
        if self.outcome is not None:
            raise UsageError(f"Effect {self.id} already has the outcome {self.outcome!r}.")
        body = {"lease_token": self.lease_token, **outcome}
        self._pending = body
        return body

    def _lease_check(self, call_timeout: float) -> str | None:
        """Why a call of `call_timeout` seconds must not start now, or None."""
        if self.lease_lost:
            raise LeaseLost(f"Effect {self.id}: our lease is gone; do not start the call.")
        left = self.lease_left()
        if left < call_timeout:
            return f"{left:.1f} s of the lease left, and the call may take {call_timeout:g} s"
        return None

    def _settled(self, body: dict[str, Any], record: dict[str, Any] | None) -> None:
        self.outcome = str(body["status"])
        self._pending = None
        if record is not None:
            self.record = protocol.parse(EffectRecord, record)

    def _hand_over(self, body: dict[str, Any], reporter: Reporter) -> EffectRecord:
        """The outcome taken as reported, its report sent behind by `reporter`."""
        self._settled(body, None)
        reporter.submit(self.id, protocol.outcome(self.id, body), self._recorded)
        return self.record

    def _recorded(self, record: dict[str, Any] | None) -> None:
        if record is not None:
            self.record = protocol.parse(EffectRecord, record)

    def _stale(self, body: dict[str, Any], exc: LedgerRequestError) -> LeaseLost:
        self._settled(body, None)
        return protocol.stale(self.id, str(body["status"]), exc.detail, self.lease_lost)


def confirmed(provider_ref: str, response: Any) -> dict[str, Any]:
    return {"status": "confirmed", "provider_ref": provider_ref, "response": response}


def exit_outcome(exc: BaseException | None) -> dict[str, Any]:
    """The outcome reported for a block left without one (see the module docstring)."""
    if isinstance(exc, NotSent):
        return {"status": "not_sent", "error": {"detail": str(exc), "data": exc.detail}}
    if exc is None:
        error: Error = (
            "The effect block ended without reporting an outcome; whether the provider acted "
            "is not known."
        )
        return {"status": "unknown", "error": error}
    return {"status": "unknown", "error": describe(exc)}


def describe(exc: BaseException) -> dict[str, Any]:
    """The error recorded for an exception that left an effect block."""
    return {
        "exception": type(exc).__name__,
        "message": str(exc)[:2000],
        "transport": isinstance(exc, TRANSPORT_ERRORS),
    }


# Failures of the provider call itself: the request may or may not have arrived.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectionError,
    httpx.TimeoutException,
    httpx.TransportError,
)


class Effect(EffectHandle):
    """An effect handle on the sync client."""

    def __init__(
        self,
        transport: Transport,
        record: EffectRecord,
        *,
        replayed: bool,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        super().__init__(record, replayed=replayed, heartbeat=heartbeat)
        self._transport = transport

    def confirm(
        self, provider_ref: str, response: Any = None, *, wait: bool = True
    ) -> EffectRecord:
        """The provider did it; `provider_ref` is its id for the result (a charge id).
        `wait=False` hands the report to the client's background thread and returns at once
        (`ledger_client.behind`): the client's next request waits for it."""
        if wait:
            record = self._report(confirmed(provider_ref, response))
        else:
            body = self._body(confirmed(provider_ref, response))
            self.stop_heartbeat()
            record = self._hand_over(body, self._transport.behind)
        self.result = response
        return record

    def fail(self, error: Error) -> EffectRecord:
        """The provider definitely refused (a decline, a 4xx that means "no"). Terminal."""
        return self._report({"status": "failed", "error": error})

    def unknown(self, error: Error) -> EffectRecord:
        """We cannot tell whether the provider acted (a timeout, a lost response)."""
        return self._report({"status": "unknown", "error": error})

    def not_sent(self, error: Error) -> EffectRecord:
        """The request certainly never reached the provider; back to `planned`."""
        return self._report({"status": "not_sent", "error": error})

    def awaiting(self, provider_ref: str = "", response: Any = None) -> EffectRecord:
        """The provider accepted it and will confirm later (a webhook, a poll)."""
        body = {"status": "awaiting_confirmation", "provider_ref": provider_ref}
        return self._report({**body, "response": response})

    def ensure_lease(self, call_timeout: float) -> None:
        """Call right before a provider call that may take up to `call_timeout` seconds: with
        less of the lease left, the call is not started, the effect is reported `not_sent` and
        `LeaseTooShort` is raised."""
        why = self._lease_check(call_timeout)
        if why is not None:
            self.not_sent({"detail": f"not started: {why}"})
            raise LeaseTooShort(f"Effect {self.id}: {why}; it was not sent.")

    def stop_heartbeat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def _report(self, outcome: dict[str, Any]) -> EffectRecord:
        body = self._body(outcome)
        # Stop beating first: a beat after the outcome would be refused and look like a loss.
        self.stop_heartbeat()
        self._send(body)
        return self.record

    def _send(self, body: dict[str, Any]) -> None:
        try:
            record = self._transport.send(protocol.outcome(self.id, body))
        except LedgerRequestError as exc:
            if exc.code != "stale_lease":
                raise
            raise self._stale(body, exc) from exc
        self._settled(body, record)

    def finish(self, exc: BaseException | None) -> bool:
        """Report what leaving the block means, unless an outcome is in: re-send one that did
        not get through, or report `exit_outcome(exc)`. True when that was an outcome the code
        never gave (the block ended without one)."""
        self.stop_heartbeat()
        if self._pending is not None:
            self._send(self._pending)
            return False
        if self.outcome is not None:
            return False
        self._report(exit_outcome(exc))
        return exc is None


class AsyncEffect(EffectHandle):
    """An effect handle on the async client: the same outcomes, awaited."""

    def __init__(
        self,
        transport: AsyncTransport,
        record: EffectRecord,
        *,
        replayed: bool,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        super().__init__(record, replayed=replayed, heartbeat=heartbeat)
        self._transport = transport

    async def confirm(
        self, provider_ref: str, response: Any = None, *, wait: bool = True
    ) -> EffectRecord:
        if wait:
            record = await self._report(confirmed(provider_ref, response))
        else:
            body = self._body(confirmed(provider_ref, response))
            await self.stop_heartbeat()
            record = self._hand_over(body, self._transport.behind)
        self.result = response
        return record

    async def fail(self, error: Error) -> EffectRecord:
        return await self._report({"status": "failed", "error": error})

    async def unknown(self, error: Error) -> EffectRecord:
        return await self._report({"status": "unknown", "error": error})

    async def not_sent(self, error: Error) -> EffectRecord:
        return await self._report({"status": "not_sent", "error": error})

    async def awaiting(self, provider_ref: str = "", response: Any = None) -> EffectRecord:
        body = {"status": "awaiting_confirmation", "provider_ref": provider_ref}
        return await self._report({**body, "response": response})

    async def ensure_lease(self, call_timeout: float) -> None:
        why = self._lease_check(call_timeout)
        if why is not None:
            await self.not_sent({"detail": f"not started: {why}"})
            raise LeaseTooShort(f"Effect {self.id}: {why}; it was not sent.")

    async def stop_heartbeat(self) -> None:
        if self.heartbeat is not None:
            await self.heartbeat.astop()

    async def _report(self, outcome: dict[str, Any]) -> EffectRecord:
        body = self._body(outcome)
        await self.stop_heartbeat()
        await self._send(body)
        return self.record

    async def _send(self, body: dict[str, Any]) -> None:
        try:
            record = await self._transport.send(protocol.outcome(self.id, body))
        except LedgerRequestError as exc:
            if exc.code != "stale_lease":
                raise
            raise self._stale(body, exc) from exc
        self._settled(body, record)

    async def finish(self, exc: BaseException | None) -> bool:
        await self.stop_heartbeat()
        if self._pending is not None:
            await self._send(self._pending)
            return False
        if self.outcome is not None:
            return False
        await self._report(exit_outcome(exc))
        return exc is None
