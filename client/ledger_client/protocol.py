"""The protocol core that `Ledger` (sync) and `AsyncLedger` share: what each call sends, which
failures may be retried, and what an answer means. No I/O happens here; each client only moves
a `Call` over its own transport and hands the answer back.

Retries. A call is retried only when a repeat cannot do anything twice:
- the request never reached the ledger (the connection could not be made): any call;
- any other transport failure, a 503 (the database was unreachable, or the front server found
  the application not accepting: nothing committed), or a 502 or 504 from the front server (the
  application stopped or did not answer in time: the request may have committed), on a call
  that is idempotent: reads, and writes the ledger recognises as repeats (an intent by
  its effect key, a claim by its `claim_id`, a heartbeat, an outcome with the same body, a
  cancel, a compensation by its `compensation_key`, recovery).
Every call this client builds is idempotent in that sense; `Call.idempotent` is False only for
calls built without their repeat key. The delay grows exponentially with full jitter.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from ledger_client import errors
from ledger_client.models import EffectRecord, RecoveryPlan, Refusal

API_PREFIX = "/api/v1"
USER_AGENT = "effect-ledger-client/0.2"
# The ledger's long poll waits at most 60 s; the HTTP timeout allows for the answer's way back.
LONG_POLL_MAX = 60
LONG_POLL_GRACE = 10.0
# Seconds before asking again when the ledger answered a long poll early (no place to wait).
LONG_POLL_RETRY = 2.0

M = TypeVar("M", bound=BaseModel)
Failure = Literal["connect", "transport", "unavailable"]


@dataclass(frozen=True)
class Call:
    method: Literal["GET", "POST"]
    path: str
    body: Mapping[str, Any] | None = None
    params: Mapping[str, Any] | None = None
    timeout: float | None = None
    idempotent: bool = True


@dataclass(frozen=True)
class Retry:
    """How often and how long to retry what may be retried (see the module docstring)."""

    retries: int = 3
    base: float = 0.2
    cap: float = 3.0
    jitter: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (1, 2, ...): full jitter."""
        return self.jitter.uniform(0, min(self.cap, self.base * 2 ** (attempt - 1)))

    def should_retry(self, call: Call, failure: Failure, attempt: int) -> bool:
        if attempt > self.retries:
            return False
        return failure == "connect" or call.idempotent


def failure_of(status: int) -> Failure | None:
    """The kind of failure an HTTP status stands for, if it is one a repeat may get past."""
    if status == 503:
        return "unavailable"
    if status in (502, 504):
        # Sent by a proxy when the application broke off or was too slow: like a transport
        # failure after the request was sent, it may have taken effect.
        return "transport"
    return None


def failure_label(status: int, body: Any) -> str:
    """How a failed answer is named in `LedgerUnavailable`: its status and error code."""
    code = body.get("error") if isinstance(body, dict) else None
    if not isinstance(code, str):
        code = {502: "bad_gateway", 503: "unavailable", 504: "gateway_timeout"}.get(status, "")
    return f"{status} {code}".rstrip()


def unavailable(call: Call, tries: int, last: str) -> errors.LedgerUnavailable:
    return errors.LedgerUnavailable(
        f"The ledger did not answer {call.method} {call.path} after {tries} "
        f"tr{'y' if tries == 1 else 'ies'} ({last})."
    )


def decode(call: Call, status: int, body: Any) -> dict[str, Any]:
    """The JSON object of a successful answer; a refusal raises `LedgerRequestError`."""
    data = body if isinstance(body, dict) else {"detail": str(body)[:500]}
    if status >= 400:
        try:
            refusal = Refusal.model_validate({"error": "error", "detail": f"HTTP {status}", **data})
        except ValidationError:
            refusal = Refusal(error=str(data.get("error", "error")), detail=f"HTTP {status}")
        raise errors.LedgerRequestError(status, refusal)
    return data


def parse(model: type[M], data: Mapping[str, Any]) -> M:
    """A typed answer; an answer that does not fit is the ledger's fault, said plainly."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise errors.LedgerClientError(
            f"The ledger's answer is not a {model.__name__}: {exc.errors()[:3]}"
        ) from exc


# --- Calls -----------------------------------------------------------------------------------


def intent(
    *,
    run_id: str,
    step_id: str,
    tool: str,
    target: str,
    request: Mapping[str, Any],
    claim: bool,
    owner: str,
    lease_seconds: int | None,
    depends_on: Iterable[str] = (),
    effect_key: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    callback_url: str | None = None,
    key_includes_request: bool = False,
) -> Call:
    body: dict[str, Any] = {
        "run_id": run_id,
        "step_id": step_id,
        "tool": tool,
        "target": target,
        "request": dict(request),
        "depends_on": [str(d) for d in depends_on],
        "claim": claim,
    }
    if claim:
        # One claim_id per attempt, kept by the retries: a claim whose answer was lost comes
        # back with the same lease token instead of a refusal.
        body |= {"owner": owner, "claim_id": uuid.uuid4().hex}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
    optional = {"effect_key": effect_key, "callback_url": callback_url}
    body |= {k: v for k, v in optional.items() if v is not None}
    if provenance is not None:
        body["provenance"] = dict(provenance)
    if key_includes_request:
        body["key_includes_request"] = True
    return Call("POST", "/effects", body)


def claim(effect_id: str, *, owner: str, lease_seconds: int | None) -> Call:
    body: dict[str, Any] = {"owner": owner, "claim_id": uuid.uuid4().hex}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return Call("POST", f"/effects/{effect_id}/claim", body)


def heartbeat(effect_id: str, token: str, lease_seconds: int) -> Call:
    body = {"lease_token": token, "lease_seconds": lease_seconds}
    return Call("POST", f"/effects/{effect_id}/heartbeat", body)


def end_lease(effect_id: str, owner: str) -> Call:
    return Call("POST", f"/effects/{effect_id}/end-lease", {"owner": owner})


def outcome(effect_id: str, body: Mapping[str, Any]) -> Call:
    return Call("POST", f"/effects/{effect_id}/outcome", body)


def cancel(effect_id: str, reason: str) -> Call:
    return Call("POST", f"/effects/{effect_id}/cancel", {"reason": reason})


def compensate(
    effect_id: str,
    *,
    tool: str | None,
    request: Mapping[str, Any],
    reason: str,
    compensation_key: str | None,
) -> Call:
    # Without a key of the caller's the ledger's default (`1`) holds: a fixed key, so that a
    # retry, or the same compensation asked again after a restore, is the same compensation.
    # A random key here would make each of those a second refund.
    body: dict[str, Any] = {"request": dict(request), "reason": reason}
    if compensation_key is not None:
        body["compensation_key"] = compensation_key
    if tool is not None:
        body["tool"] = tool
    return Call("POST", f"/effects/{effect_id}/compensate", body)


def get(effect_id: str, *, wait: int | None = None) -> Call:
    if wait is None:
        return Call("GET", f"/effects/{effect_id}")
    params = {"wait": wait}
    return Call("GET", f"/effects/{effect_id}", params=params, timeout=wait + LONG_POLL_GRACE)


def list_effects(filters: Mapping[str, str | None], *, limit: int, cursor: str | None) -> Call:
    given = {k: v for k, v in {**filters, "cursor": cursor}.items() if v is not None}
    return Call("GET", "/effects", params={**given, "limit": limit})


def journal(run_id: str, *, limit: int, cursor: str | None) -> Call:
    params: dict[str, Any] = {"limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", f"/runs/{run_id}/journal", params=params)


def recovery(
    run_id: str | None, owner: str | None, dry_run: bool, cursor: str | None = None
) -> Call:
    body: dict[str, Any] = {"dry_run": dry_run}
    if run_id is not None:
        body["run_id"] = run_id
    if owner is not None:
        body["owner"] = owner
    if cursor is not None:
        body["cursor"] = cursor
    return Call("POST", "/recovery", body)


def whole_plan(pages: list[RecoveryPlan]) -> RecoveryPlan:
    """The pages of one recovery as one plan: every page's items in order, the first page's
    counts (each page counts the same scope)."""
    return RecoveryPlan(
        effects=[item for page in pages for item in page.effects],
        counts_by_status=pages[0].counts_by_status,
        next_cursor=None,
    )


def health() -> Call:
    return Call("GET", "/health")


# --- What an intent with a claim came back as -----------------------------------------------


def opened(name: str, record: EffectRecord) -> Literal["claimed", "replayed"]:
    """`claimed` (run it now) or `replayed` (confirmed already: use its response); any other
    state raises what the caller must do instead."""
    if record.lease_token:
        return "claimed"
    if record.status == "confirmed":
        return "replayed"
    if record.status == "awaiting_approval":
        raise approval_pending(name, record.id, record)
    raise not_claimable(name, record)


def refusal(name: str, exc: errors.LedgerRequestError, effect_id: str = "") -> Exception:
    """The dedicated exception for a refused intent or claim (`exc` itself when none fits)."""
    r = exc.refusal
    if r.error == "blocked":
        waiting = r.blocked_by or []
        shown = ", ".join(f"{b.id} ({b.status})" for b in waiting)
        message = f"Effect {name} is blocked until these are confirmed: {shown}."
        return errors.Blocked(message, waiting)
    if r.error == "attempts_exhausted":
        return errors.AttemptsExhausted(
            f"Effect {name} used all {r.max_attempts or '?'} attempts; "
            "an operator must decide what happens next."
        )
    if r.error == "effect_key_conflict":
        return errors.EffectKeyConflict(f"Effect {name}: {r.detail}")
    if r.error == "approval_required":
        return approval_pending(name, effect_id, None)
    if r.error == "halted":
        return errors.Halted(f"Effect {name}: {r.detail}", r.halt)
    if r.error == "operator_decided":
        return errors.OperatorDecided(f"Effect {name}: {r.detail}")
    if r.error == "limit_exceeded":
        return errors.LimitExceeded(f"Effect {name}: {r.detail}", r.retry_after or 60, r.limit)
    if r.error == "invalid_transition":
        status = r.status or "dispatching"
        return errors.NeedsReview(
            f"Effect {name} is {status} under another claim and may be executing now; "
            "do not run it again (ask recover() what to do).",
            status,
        )
    return exc


def approval_pending(
    name: str, effect_id: str, record: EffectRecord | None
) -> errors.ApprovalPending:
    return errors.ApprovalPending(
        f"Effect {name} is above its tool's approval threshold and waits for an operator's "
        f"decision in the ledger (effect {effect_id}); do not run it until it is approved.",
        effect_id,
        record,
    )


def not_claimable(name: str, record: EffectRecord) -> errors.LedgerClientError:
    status = record.status
    if status in ("failed", "cancelled", "compensated"):
        return errors.EffectClosed(
            f"Effect {name} already ended {status}; this effect cannot run again.", status, record
        )
    why = {
        "unknown": "its outcome is unknown (the provider may have acted): the ledger "
        "reconciles it or an operator decides",
        "awaiting_confirmation": "the provider accepted it and its confirmation is pending",
        "dispatching": "another worker holds it and may be executing it now",
    }.get(status, f"it is {status}")
    return errors.NeedsReview(f"Effect {name} cannot be run again now: {why}.", status, record)


def stale(effect_id: str, status: str, detail: str, lease_lost: bool) -> errors.LeaseLost:
    why = "a heartbeat was refused earlier" if lease_lost else detail
    return errors.LeaseLost(
        f"Effect {effect_id}: our lease is gone ({why}). The {status!r} report was kept as a "
        "late outcome, not applied; recovery decides what happens next."
    )
