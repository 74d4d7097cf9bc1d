"""`Ledger`: record intent and claim in one call, run the effect, report what happened.

The rule for leaving an effect block without an outcome:

* an exception escaped (a provider timeout, a dropped connection, or anything else) → the
  effect is reported `unknown` and the exception is re-raised. Code that knows the request
  never reached the provider (it failed validation first, the provider answered 429 before
  doing anything) says so with `e.not_sent(...)` before raising; nothing else counts as proof,
  because an exception raised after the request was written may follow a provider that acted.
* the block ended cleanly but reported nothing → `unknown` as well, then `OutcomeMissing` is
  raised: an effect is never `confirmed` by default.
* an outcome is never `failed` unless the code said so with `e.fail(...)`: a timeout is not a
  failure.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import httpx

from ledger_client.effect import Effect, describe
from ledger_client.errors import (
    ApprovalPending,
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    Halted,
    LedgerClientError,
    LedgerRequestError,
    LimitExceeded,
    NeedsReview,
    OutcomeMissing,
)
from ledger_client.heartbeat import Clock, Heartbeat
from ledger_client.recovery import RecoveryItem, RecoveryPlan
from ledger_client.transport import Transport

log = logging.getLogger("ledger_client")

StepFunction = Callable[[Effect, dict[str, Any]], Any]
# The ledger's long poll waits at most 60 s; the HTTP timeout allows for the answer's way back.
LONG_POLL_MAX = 60
LONG_POLL_GRACE = 10.0
# Seconds to wait before polling again when the ledger could not take the long poll.
LONG_POLL_RETRY = 2.0


class Ledger:
    """A connection to the ledger for one worker (`owner`, a label shown in leases).

    While an effect block runs, a heartbeat extends its lease every `lease_seconds / 3` on
    `clock` (default: a background thread in real time). `call_timeout`: the longest a
    provider call may take; `step` starts no call with less of the lease left
    (`Effect.ensure_lease`, which `with` blocks call themselves)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        owner: str,
        lease_seconds: int = 30,
        timeout: float = 10.0,
        retries: int = 3,
        http: httpx.Client | None = None,
        clock: Clock | None = None,
        call_timeout: float | None = None,
    ) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.call_timeout = call_timeout
        self.clock = clock
        self.transport = Transport(base_url, api_key, timeout=timeout, retries=retries, http=http)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- Effects -----------------------------------------------------------------------------

    def effect(
        self,
        run_id: str,
        step_id: str,
        tool: str,
        target: str,
        request: Mapping[str, Any],
        *,
        depends_on: Iterable[str] = (),
        effect_key: str | None = None,
        provenance: Mapping[str, Any] | None = None,
    ) -> EffectBlock:
        """`with ledger.effect(...) as e:` — see the module docstring for the exit rules."""
        body: dict[str, Any] = {
            "run_id": run_id,
            "step_id": step_id,
            "tool": tool,
            "target": target,
            "request": dict(request),
            "depends_on": [str(d) for d in depends_on],
            "claim": True,
            "owner": self.owner,
            "lease_seconds": self.lease_seconds,
        }
        if effect_key is not None:
            body["effect_key"] = effect_key
        if provenance is not None:
            body["provenance"] = dict(provenance)
        return EffectBlock(self, body)

    def step(
        self, *, tool: str, target: str, provider_ref: Callable[[Any], str] | None = None
    ) -> Callable[[StepFunction], Callable[..., Any]]:
        """Decorator: `fn(effect, request) -> response` becomes
        `fn(run_id, step_id, request, *, depends_on=(), effect_key=None, provenance=None,
        target=None) -> response`. The response is confirmed with `provider_ref(response)`
        (default: its `"id"`) unless `fn` reported an outcome itself; on a replay `fn` is not
        called and the recorded response is returned."""
        ref = provider_ref or _id_of
        default_target = target

        def decorate(fn: StepFunction) -> Callable[..., Any]:
            @functools.wraps(fn)
            def run(
                run_id: str,
                step_id: str,
                request: Mapping[str, Any],
                *,
                depends_on: Iterable[str] = (),
                effect_key: str | None = None,
                provenance: Mapping[str, Any] | None = None,
                target: str | None = None,
            ) -> Any:
                with self.effect(
                    run_id,
                    step_id,
                    tool,
                    target or default_target,
                    request,
                    depends_on=depends_on,
                    effect_key=effect_key,
                    provenance=provenance,
                ) as e:
                    if e.replayed:
                        return e.result
                    if self.call_timeout is not None:
                        e.ensure_lease(self.call_timeout)
                    response = fn(e, dict(request))
                    if e.outcome is None:
                        e.confirm(ref(response), response)
                    return response

            return run

        return decorate

    def get(self, effect_id: str) -> dict[str, Any]:
        return self.transport.request("GET", f"/effects/{effect_id}")[1]

    def wait_for_change(
        self, effect_id: str, *, status: str | None = None, timeout: float = 60.0
    ) -> dict[str, Any]:
        """Return the effect as soon as its status is no longer `status` (default: its status
        now), or as it is once `timeout` seconds have passed, whichever comes first. Uses the
        ledger's long poll (`GET /effects/{id}?wait=N`), so no time is lost between polls."""
        deadline = time.monotonic() + timeout
        record = self.get(effect_id) if status is None else None
        known = status if status is not None else record["status"]  # type: ignore[index]
        while (left := deadline - time.monotonic()) >= 1:
            wait = min(LONG_POLL_MAX, int(left))
            asked = time.monotonic()
            _, record = self.transport.request(
                "GET",
                f"/effects/{effect_id}",
                params={"wait": wait},
                timeout=wait + LONG_POLL_GRACE,
            )
            if record["status"] != known:
                return record
            if time.monotonic() - asked < wait - 1:
                # Answered early, unchanged: the ledger had no place to wait (it said
                # Retry-After); ask again a little later rather than at once.
                time.sleep(min(LONG_POLL_RETRY, max(0.0, deadline - time.monotonic())))
        return record if record is not None else self.get(effect_id)

    def wait_for_approval(
        self,
        effect_id: str,
        *,
        timeout: float = 3600.0,
        interval: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, Any]:
        """Poll the effect until an operator has decided (it leaves `awaiting_approval`) and
        return it: `planned` when approved (enter the effect block again to claim and run it),
        `cancelled` when rejected. Raises `ApprovalPending` when `timeout` seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.get(effect_id)
            if record["status"] != "awaiting_approval":
                return record
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApprovalPending(
                    f"Effect {effect_id} still waits for approval after {timeout:g} s.",
                    effect_id,
                    record,
                )
            sleep(min(interval, left))

    def recover(
        self, run_id: str | None = None, *, owner: str | None = None, dry_run: bool = False
    ) -> RecoveryPlan:
        """Ask what is incomplete (all of this agent's effects, or one run's, or one owner's)
        and, unless `dry_run`, let the ledger start reconciling. The caller re-runs the
        `retry_safe` items; see `ledger_client.recovery` for every action."""
        body: dict[str, Any] = {"dry_run": dry_run}
        if run_id is not None:
            body["run_id"] = run_id
        if owner is not None:
            body["owner"] = owner
        _, data = self.transport.request("POST", "/recovery", body)
        return RecoveryPlan(
            [RecoveryItem(i["effect"], i["action"], i["reason"]) for i in data["effects"]],
            data.get("counts_by_status", {}),
        )

    # --- Claiming ----------------------------------------------------------------------------

    def _open(self, body: dict[str, Any]) -> Effect:
        # One claim_id per attempt, reused by the transport's retries: a claim whose reply was
        # lost comes back with the same lease token instead of a refusal.
        body = {**body, "claim_id": uuid.uuid4().hex}
        name = f"{body['run_id']}:{body['step_id']}"
        try:
            sent = time.monotonic()
            _, record = self.transport.request("POST", "/effects", body)
        except LedgerRequestError as exc:
            raise _refusal(name, exc) from exc
        if record.get("lease_token"):
            granted = int(record.get("lease_seconds") or self.lease_seconds)
            heartbeat = Heartbeat(
                self.transport,
                str(record["id"]),
                record["lease_token"],
                granted,
                self.clock,
                lease_until=sent + granted,
            )
            heartbeat.start()
            return Effect(self.transport, record, replayed=False, heartbeat=heartbeat)
        if record["status"] == "confirmed":
            return Effect(self.transport, record, replayed=True)
        if record["status"] == "awaiting_approval":
            raise _approval_pending(name, str(record["id"]), record)
        raise _not_claimable(name, record)


class EffectBlock:
    """The context manager `Ledger.effect` returns; entering it records intent and claims."""

    def __init__(self, ledger: Ledger, body: dict[str, Any]) -> None:
        self.ledger = ledger
        self.body = body
        self.effect: Effect | None = None

    def __enter__(self) -> Effect:
        self.effect = self.ledger._open(self.body)
        return self.effect

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        e = self.effect
        assert e is not None
        e.stop_heartbeat()
        if e.outcome is not None and not e.report_pending:
            return
        if exc is None:
            if not e.finish_pending():
                e.unknown(
                    "The effect block ended without reporting an outcome; whether the provider "
                    "acted is not known."
                )
                raise OutcomeMissing(
                    f"Effect {e.id} ({e.idempotency_key}) ended without confirm/fail/unknown/"
                    "not_sent/awaiting; it was recorded as unknown."
                )
            return
        try:
            if not e.finish_pending():
                e.unknown(describe(exc))
        except LedgerClientError as report_error:
            log.error("could not record the outcome of effect %s: %s", e.id, report_error)
            exc.add_note(f"effect {e.id}: the outcome could not be recorded: {report_error}")


def _refusal(name: str, exc: LedgerRequestError) -> LedgerClientError:
    if exc.code == "blocked":
        waiting = exc.body.get("blocked_by", [])
        shown = ", ".join(f"{b.get('id')} ({b.get('status')})" for b in waiting)
        return Blocked(f"Effect {name} is blocked until these are confirmed: {shown}.", waiting)
    if exc.code == "attempts_exhausted":
        return AttemptsExhausted(
            f"Effect {name} used all {exc.body.get('max_attempts', '?')} attempts; "
            "an operator must decide what happens next."
        )
    if exc.code == "effect_key_conflict":
        return EffectKeyConflict(f"Effect {name}: {exc.detail}")
    if exc.code == "approval_required":
        return _approval_pending(name, str(exc.body.get("id", "")), None)
    if exc.code == "halted":
        return Halted(f"Effect {name}: {exc.detail}", exc.body.get("halt") or {})
    if exc.code == "limit_exceeded":
        retry_after = int(exc.body.get("retry_after") or 60)
        return LimitExceeded(
            f"Effect {name}: {exc.detail}", retry_after, exc.body.get("limit") or {}
        )
    if exc.code == "invalid_transition":
        status = str(exc.body.get("status", "dispatching"))
        return NeedsReview(
            f"Effect {name} is {status} under another claim and may be executing now; "
            "do not run it again (ask recover() what to do).",
            status,
        )
    return exc


def _approval_pending(name: str, effect_id: str, record: dict[str, Any] | None) -> ApprovalPending:
    return ApprovalPending(
        f"Effect {name} is above its tool's approval threshold and waits for an operator; "
        "call wait_for_approval() and run it again once approved.",
        effect_id,
        record,
    )


def _not_claimable(name: str, record: dict[str, Any]) -> LedgerClientError:
    status = record["status"]
    if status in ("failed", "cancelled", "compensated"):
        return EffectClosed(
            f"Effect {name} already ended {status}; this effect key cannot run again.",
            status,
            record,
        )
    why = {
        "unknown": "its outcome is unknown (the provider may have acted): the ledger "
        "reconciles it or an operator decides",
        "awaiting_confirmation": "the provider accepted it and its confirmation is pending",
        "dispatching": "another worker holds it and may be executing it now",
    }.get(status, f"it is {status}")
    return NeedsReview(f"Effect {name} cannot be run again: {why}.", status, record)


def _id_of(response: Any) -> str:
    if isinstance(response, Mapping) and response.get("id") is not None:
        return str(response["id"])
    return ""
