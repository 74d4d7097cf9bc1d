"""The handle an effect block works with: the ids to send to the provider, and the outcome."""

from __future__ import annotations

import time
from typing import Any

import httpx

from ledger_client.errors import LeaseLost, LeaseTooShort, LedgerRequestError, UsageError
from ledger_client.heartbeat import Heartbeat
from ledger_client.transport import Transport

Error = str | dict[str, Any]


class Effect:
    """One claimed (or replayed) effect.

    `idempotency_key` is what the provider call must carry (e.g. an `Idempotency-Key` header):
    it is the same for every attempt of this effect. `replayed` is true when the ledger already
    holds this effect as `confirmed`: do not execute again, use `result` (the recorded response,
    redacted as the ledger stores it).
    """

    def __init__(
        self,
        transport: Transport,
        record: dict[str, Any],
        *,
        replayed: bool,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self._transport = transport
        self._heartbeat = heartbeat
        self._pending: dict[str, Any] | None = None
        self.record = record
        self.replayed = replayed
        self.outcome: str | None = "confirmed" if replayed else None
        self.result: Any = record.get("response") if replayed else None

    @property
    def id(self) -> str:
        return str(self.record["id"])

    @property
    def idempotency_key(self) -> str:
        return str(self.record["idempotency_key"])

    @property
    def attempt(self) -> int:
        return int(self.record["attempt"])

    @property
    def status(self) -> str:
        return str(self.record["status"])

    @property
    def lease_token(self) -> str | None:
        return self.record.get("lease_token")

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat was refused: check before starting more provider work."""
        return self._heartbeat is not None and self._heartbeat.lost.is_set()

    def lease_left(self) -> float:
        """Seconds of the lease surely left (0 on a replay, or once it is lost)."""
        if self._heartbeat is None or self._heartbeat.lost.is_set():
            return 0.0
        return max(0.0, self._heartbeat.lease_until - time.monotonic())

    def ensure_lease(self, call_timeout: float) -> None:
        """Call right before the provider call that may take up to `call_timeout` seconds: if
        less of the lease is left, the call is not started, the effect is reported `not_sent`
        (it goes back to `planned`) and `LeaseTooShort` is raised."""
        if self.lease_lost:
            raise LeaseLost(f"Effect {self.id}: our lease is gone; do not start the call.")
        left = self.lease_left()
        if left < call_timeout:
            why = f"{left:.1f} s of the lease left, and the call may take {call_timeout:g} s"
            self.not_sent({"detail": f"not started: {why}"})
            raise LeaseTooShort(f"Effect {self.id}: {why}; it was not sent.")

    @property
    def halt(self) -> dict[str, Any] | None:
        """The halt the latest heartbeat reported (scope, reason, by, since), or None. An
        operator halted this kind of work: stop before sending anything more, report
        `not_sent` if nothing went out."""
        return self._heartbeat.halt if self._heartbeat is not None else None

    def __repr__(self) -> str:
        return f"<Effect {self.id} {self.status} attempt={self.attempt} replayed={self.replayed}>"

    # --- Outcomes ----------------------------------------------------------------------------

    def confirm(self, provider_ref: str, response: Any = None) -> dict[str, Any]:
        """The provider did it; `provider_ref` is its id for the result (a charge id)."""
        record = self._report(
            {"status": "confirmed", "provider_ref": provider_ref, "response": response}
        )
        self.result = response
        return record

    def fail(self, error: Error) -> dict[str, Any]:
        """The provider definitely refused (a decline, a 4xx that means "no"). Terminal."""
        return self._report({"status": "failed", "error": error})

    def unknown(self, error: Error) -> dict[str, Any]:
        """We cannot tell whether the provider acted (a timeout, a lost response)."""
        return self._report({"status": "unknown", "error": error})

    def not_sent(self, error: Error) -> dict[str, Any]:
        """The request certainly never reached the provider (refused before sending); the
        effect goes back to `planned` and may be claimed again."""
        return self._report({"status": "not_sent", "error": error})

    def awaiting(self, provider_ref: str = "", response: Any = None) -> dict[str, Any]:
        """The provider accepted it and will confirm later (a webhook, a poll)."""
        return self._report(
            {"status": "awaiting_confirmation", "provider_ref": provider_ref, "response": response}
        )

    def _report(self, outcome: dict[str, Any]) -> dict[str, Any]:
        if self.replayed:
            raise UsageError(f"Effect {self.id} was already confirmed; it is a replay.")
        if self.outcome is not None:
            raise UsageError(f"Effect {self.id} already has the outcome {self.outcome!r}.")
        # Stop beating first: a beat landing after the outcome would be refused and look like
        # a lost lease.
        self.stop_heartbeat()
        body = {"lease_token": self.lease_token, **outcome}
        self._pending = body
        return self._send(body)

    def _send(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            _, record = self._transport.request("POST", f"/effects/{self.id}/outcome", body)
        except LedgerRequestError as exc:
            if exc.code != "stale_lease":
                raise
            self.outcome = body["status"]
            self._pending = None
            why = "a heartbeat was refused earlier" if self.lease_lost else exc.detail
            raise LeaseLost(
                f"Effect {self.id}: our lease is gone ({why}). The {body['status']!r} report was "
                "kept as a late outcome, not applied; recovery decides what happens next."
            ) from exc
        self.outcome = body["status"]
        self._pending = None
        self.record = record
        return record

    @property
    def report_pending(self) -> bool:
        """An outcome report was attempted but did not get through (the ledger unreachable)."""
        return self._pending is not None

    def finish_pending(self) -> bool:
        """Re-send an outcome whose report did not get through; False when there is none."""
        if self._pending is None:
            return False
        self._send(self._pending)
        return True

    def stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()


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
