"""`Ledger`, the synchronous client: one worker's connection to the ledger.

    ledger = Ledger("http://127.0.0.1:8000", key, owner="executor-1")
    with ledger.effect(run_id, "pay", "charge_card", "acct_42", request) as e:
        if not e.replayed:
            charge = provider.charge(request, idempotency_key=e.idempotency_key)
            e.confirm(charge["id"], charge)

What each call sends and what its answer means is `ledger_client.protocol`, shared with
`AsyncLedger`; this module only moves calls over httpx and sleeps between retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import httpx

from ledger_client import protocol
from ledger_client.behind import Reporter
from ledger_client.effect import Effect
from ledger_client.errors import LedgerRequestError, NeedsReview, OutcomeMissing
from ledger_client.heartbeat import Clock, ThreadHeartbeat
from ledger_client.models import EffectPage, EffectRecord, Health, RecoveryPlan
from ledger_client.protocol import Call, Failure, Retry
from ledger_client.tracing import trace_headers


class Transport:
    """Sends a `Call`, retrying what `Retry` allows. httpx clients are thread-safe: the
    heartbeat threads and the thread that writes confirmations behind share this one."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        retry: Retry,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry
        self.sleep = sleep
        self.http = http or httpx.Client(
            base_url=base_url.rstrip("/") + protocol.API_PREFIX,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": protocol.USER_AGENT},
            timeout=timeout,
        )
        self._behind: Reporter | None = None

    @property
    def behind(self) -> Reporter:
        """The thread this client's confirmations are written behind on (`ledger_client.behind`)."""
        if self._behind is None:
            self._behind = Reporter(self._deliver)
        return self._behind

    def close(self) -> None:
        if self._behind is not None:
            self._behind.close()
        self.http.close()

    def send(self, call: Call) -> dict[str, Any]:
        """Send `call` once the confirmations handed over before it are in."""
        if self._behind is not None:
            self._behind.drain()
        return self._deliver(call)

    def _deliver(self, call: Call) -> dict[str, Any]:
        attempt = 0
        while True:
            attempt += 1
            failure: Failure
            try:
                response = self.http.request(
                    call.method,
                    call.path,
                    json=call.body,
                    params=call.params,
                    headers=trace_headers(),
                    timeout=call.timeout if call.timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure, last = "connect", f"{type(exc).__name__}: {exc}"
            except httpx.TransportError as exc:
                failure, last = "transport", f"{type(exc).__name__}: {exc}"
            else:
                kind = protocol.failure_of(response.status_code)
                if kind is None:
                    return protocol.decode(call, response.status_code, _json(response))
                failure, last = kind, protocol.failure_label(response.status_code, _json(response))
            if not self.retry.should_retry(call, failure, attempt):
                raise protocol.unavailable(call, attempt, last)
            self.sleep(self.retry.delay(attempt))


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"detail": response.text[:500]}


class Ledger:
    """A connection to the ledger for one worker (`owner`, a label shown in leases).

    While an effect block runs, a heartbeat extends its lease every `lease_seconds / 3` on
    `clock` (default: a background thread in real time). `call_timeout`: the longest a provider
    call may take; no call starts with less of the lease left (`Effect.ensure_lease`)."""

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
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.call_timeout = call_timeout
        self.clock = clock
        self.sleep = sleep
        retry = Retry(retries=retries)
        self.transport = Transport(
            base_url, api_key, timeout=timeout, retry=retry, http=http, sleep=sleep
        )

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
        **options: Any,
    ) -> EffectBlock:
        """`with ledger.effect(...) as e:` records intent and claims on entry; see
        `ledger_client.effect` for the exit rules. `options`: `depends_on`, `effect_key`,
        `provenance`, `callback_url`, `key_includes_request`."""
        return EffectBlock(self, run_id, step_id, tool, target, request, options)

    def record_intent(
        self,
        run_id: str,
        step_id: str,
        tool: str,
        target: str,
        request: Mapping[str, Any],
        *,
        claim: bool = False,
        depends_on: Iterable[str] = (),
        effect_key: str | None = None,
        provenance: Mapping[str, Any] | None = None,
        callback_url: str | None = None,
        key_includes_request: bool = False,
    ) -> EffectRecord:
        """POST /effects: record intent (and with `claim`, claim it in the same call)."""
        call = protocol.intent(
            run_id=run_id,
            step_id=step_id,
            tool=tool,
            target=target,
            request=request,
            claim=claim,
            owner=self.owner,
            lease_seconds=self.lease_seconds,
            depends_on=depends_on,
            effect_key=effect_key,
            provenance=provenance,
            callback_url=callback_url,
            key_includes_request=key_includes_request,
        )
        return protocol.parse(EffectRecord, self.transport.send(call))

    def open(
        self,
        run_id: str,
        step_id: str,
        tool: str,
        target: str,
        request: Mapping[str, Any],
        **options: Any,
    ) -> Effect:
        """Record intent and claim: a claimed effect (its heartbeat running) or a replay;
        anything else raises what the caller must do instead (`protocol.opened`)."""
        name = f"{run_id}:{step_id}"
        sent = time.monotonic()
        try:
            args = (run_id, step_id, tool, target, request)
            record = self.record_intent(*args, claim=True, **options)
        except LedgerRequestError as exc:
            refused = protocol.refusal(name, exc)
            if isinstance(refused, NeedsReview):
                # Claimed by another worker meanwhile: the effect as it stands, to wait on.
                args = (run_id, step_id, tool, target, request)
                refused.effect = self.record_intent(*args, **options)
            raise refused from exc
        if protocol.opened(name, record) == "replayed":
            return Effect(self.transport, record, replayed=True)
        heartbeat = ThreadHeartbeat(
            self.transport,
            record.id,
            record.lease_token or "",
            record.lease_seconds or self.lease_seconds,
            sent,
            self.clock,
        )
        return Effect(self.transport, record, replayed=False, heartbeat=heartbeat)

    def claim(self, effect_id: str) -> EffectRecord:
        """Claim a planned effect (the answer carries the lease token)."""
        call = protocol.claim(effect_id, owner=self.owner, lease_seconds=self.lease_seconds)
        try:
            return protocol.parse(EffectRecord, self.transport.send(call))
        except LedgerRequestError as exc:
            raise protocol.refusal(effect_id, exc, effect_id) from exc

    def heartbeat(self, effect_id: str, lease_token: str) -> EffectRecord:
        call = protocol.heartbeat(effect_id, lease_token, self.lease_seconds)
        return protocol.parse(EffectRecord, self.transport.send(call))

    def end_lease(self, effect_id: str, owner: str) -> EffectRecord:
        """End the live lease of `owner`, a process of yours that is gone (its claim's attempt
        comes back and recovery takes the effect up); 409 `stale_lease` if it holds none."""
        call = protocol.end_lease(effect_id, owner)
        return protocol.parse(EffectRecord, self.transport.send(call))

    def report(self, effect_id: str, lease_token: str, outcome: Mapping[str, Any]) -> EffectRecord:
        """Report an outcome for a claim made with `claim` (`outcome`: status and its fields)."""
        call = protocol.outcome(effect_id, {"lease_token": lease_token, **outcome})
        return protocol.parse(EffectRecord, self.transport.send(call))

    def cancel(self, effect_id: str, reason: str = "") -> EffectRecord:
        """Cancel a planned effect, or one awaiting approval (a rejection by the end user)."""
        return protocol.parse(EffectRecord, self.transport.send(protocol.cancel(effect_id, reason)))

    def compensate(
        self,
        effect_id: str,
        *,
        request: Mapping[str, Any] | None = None,
        tool: str | None = None,
        reason: str = "",
        compensation_key: str | None = None,
    ) -> EffectRecord:
        """Record the compensation of a confirmed effect (a refund), as a planned effect."""
        call = protocol.compensate(
            effect_id,
            tool=tool,
            request=request or {},
            reason=reason,
            compensation_key=compensation_key,
        )
        return protocol.parse(EffectRecord, self.transport.send(call))

    # --- Reading -----------------------------------------------------------------------------

    def get(self, effect_id: str) -> EffectRecord:
        return protocol.parse(EffectRecord, self.transport.send(protocol.get(effect_id)))

    def list_effects(
        self,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        status: str | None = None,
        tool: str | None = None,
        owner: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> EffectPage:
        filters = {"run_id": run_id, "step_id": step_id, "status": status, "tool": tool}
        call = protocol.list_effects(filters | {"owner": owner}, limit=limit, cursor=cursor)
        return protocol.parse(EffectPage, self.transport.send(call))

    def journal(self, run_id: str, *, limit: int = 100, cursor: str | None = None) -> EffectPage:
        """A run's effects in seq order, with their recorded outcomes."""
        call = protocol.journal(run_id, limit=limit, cursor=cursor)
        return protocol.parse(EffectPage, self.transport.send(call))

    def iter_journal(self, run_id: str) -> Iterator[EffectRecord]:
        """Every effect of a run, in seq order, page after page."""
        cursor: str | None = None
        while True:
            page = self.journal(run_id, cursor=cursor)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def recover(
        self, run_id: str | None = None, *, owner: str | None = None, dry_run: bool = False
    ) -> RecoveryPlan:
        """What is incomplete (this agent's effects, one run's or one owner's), most urgent
        first, and unless `dry_run`, let the ledger start reconciling. Re-run the `retry_safe`
        items. Follows the ledger's pages to the last: the plan holds them all."""
        pages = [
            protocol.parse(
                RecoveryPlan, self.transport.send(protocol.recovery(run_id, owner, dry_run))
            )
        ]
        while pages[-1].next_cursor is not None:
            call = protocol.recovery(run_id, owner, dry_run, pages[-1].next_cursor)
            pages.append(protocol.parse(RecoveryPlan, self.transport.send(call)))
        return protocol.whole_plan(pages)

    def health(self) -> Health:
        return protocol.parse(Health, self.transport.send(protocol.health()))

    # --- Waiting -----------------------------------------------------------------------------

    def wait_for_change(
        self, effect_id: str, *, status: str | None = None, timeout: float = 60.0
    ) -> EffectRecord:
        """The effect as soon as its status is no longer `status` (default: its status now),
        or as it is after `timeout` seconds. Uses the ledger's long poll."""
        deadline = time.monotonic() + timeout
        record = self.get(effect_id)
        known = status if status is not None else record.status
        while record.status == known and (left := deadline - time.monotonic()) >= 1:
            wait = min(protocol.LONG_POLL_MAX, int(left))
            asked = time.monotonic()
            record = protocol.parse(
                EffectRecord, self.transport.send(protocol.get(effect_id, wait=wait))
            )
            if record.status == known and time.monotonic() - asked < wait - 1:
                # Answered early, unchanged: the ledger had no place to wait. Ask again later.
                self.sleep(min(protocol.LONG_POLL_RETRY, max(0.0, deadline - time.monotonic())))
        return record

    def wait_for_decision(self, effect_id: str, *, timeout: float = 3600.0) -> EffectRecord:
        """Wait while the effect awaits an operator's approval; the effect as it is then:
        `planned` when approved (claim it now), `cancelled` when rejected, still
        `awaiting_approval` when `timeout` passed first."""
        return self.wait_for_change(effect_id, status="awaiting_approval", timeout=timeout)

    wait_for_approval = wait_for_decision


class EffectBlock:
    """The context manager `Ledger.effect` returns; entering it records intent and claims."""

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        step_id: str,
        tool: str,
        target: str,
        request: Mapping[str, Any],
        options: dict[str, Any],
    ) -> None:
        self.ledger = ledger
        self.args = (run_id, step_id, tool, target, request)
        self.options = options
        self.effect: Effect | None = None

    def __enter__(self) -> Effect:
        self.effect = self.ledger.open(*self.args, **self.options)
        return self.effect

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        effect = self.effect
        if effect is None or effect.replayed:
            return
        try:
            missing = effect.finish(exc)
        except Exception as report_error:
            if exc is None:
                raise
            exc.add_note(f"effect {effect.id}: the outcome could not be recorded: {report_error}")
            return
        if missing:
            raise OutcomeMissing(
                f"Effect {effect.id} ({effect.idempotency_key}) ended without an outcome; it "
                "was recorded as unknown."
            )
