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
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import httpx

from ledger_client.effect import Effect, describe
from ledger_client.errors import (
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    Halted,
    LedgerClientError,
    LedgerRequestError,
    NeedsReview,
    OutcomeMissing,
)
from ledger_client.heartbeat import Clock, Heartbeat
from ledger_client.recovery import RecoveryItem, RecoveryPlan
from ledger_client.transport import Transport

log = logging.getLogger("ledger_client")

StepFunction = Callable[[Effect, dict[str, Any]], Any]


class Ledger:
    """A connection to the ledger for one worker (`owner`, a label shown in leases).

    While an effect block runs, a heartbeat extends its lease every `lease_seconds / 3` on
    `clock` (default: a background thread in real time)."""

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
    ) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
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
                    response = fn(e, dict(request))
                    if e.outcome is None:
                        e.confirm(ref(response), response)
                    return response

            return run

        return decorate

    def get(self, effect_id: str) -> dict[str, Any]:
        return self.transport.request("GET", f"/effects/{effect_id}")[1]

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
            _, record = self.transport.request("POST", "/effects", body)
        except LedgerRequestError as exc:
            raise _refusal(name, exc) from exc
        if record.get("lease_token"):
            heartbeat = Heartbeat(
                self.transport,
                str(record["id"]),
                record["lease_token"],
                int(record.get("lease_seconds") or self.lease_seconds),
                self.clock,
            )
            heartbeat.start()
            return Effect(self.transport, record, replayed=False, heartbeat=heartbeat)
        if record["status"] == "confirmed":
            return Effect(self.transport, record, replayed=True)
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
    if exc.code == "halted":
        return Halted(f"Effect {name}: {exc.detail}", exc.body.get("halt") or {})
    if exc.code == "invalid_transition":
        status = str(exc.body.get("status", "dispatching"))
        return NeedsReview(
            f"Effect {name} is {status} under another claim and may be executing now; "
            "do not run it again (ask recover() what to do).",
            status,
        )
    return exc


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
