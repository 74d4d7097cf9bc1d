"""`AsyncLedger`, the asyncio client: the same calls as `Ledger`, awaited. It shares the
protocol core (`ledger_client.protocol`: what is sent, what is retried, what answers mean) and
has its own transport on `httpx.AsyncClient`; it never sleeps on the event loop (retries and
long-poll pauses are `asyncio.sleep`, heartbeats are tasks).

    async with AsyncLedger(url, key, owner="executor-1") as ledger:
        async with ledger.effect(run_id, "pay", "charge_card", "acct_42", request) as e:
            if not e.replayed:
                charge = await provider.charge(request, idempotency_key=e.idempotency_key)
                await e.confirm(charge["id"], charge)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import httpx

from ledger_client import protocol
from ledger_client.behind import Reporter
from ledger_client.effect import AsyncEffect
from ledger_client.errors import LedgerRequestError, NeedsReview, OutcomeMissing
from ledger_client.heartbeat import TaskHeartbeat
from ledger_client.models import EffectPage, EffectRecord, Health, RecoveryPlan
from ledger_client.protocol import Call, Failure, Retry
from ledger_client.sync import Transport
from ledger_client.tracing import trace_headers


class AsyncTransport:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        retry: Retry,
        http: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.retry = retry
        self.sleep = sleep
        self.http = http or httpx.AsyncClient(
            base_url=base_url.rstrip("/") + protocol.API_PREFIX,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": protocol.USER_AGENT},
            timeout=timeout,
        )
        self._behind: Reporter | None = None
        self._behind_transport: Transport | None = None

    @property
    def behind(self) -> Reporter:
        """The thread this client's confirmations are written behind on: a sync transport of
        its own to the same address with the same key, so that a confirmation still goes out
        when the event loop has ended (`ledger_client.behind`)."""
        if self._behind is None:
            http = httpx.Client(
                base_url=self.http.base_url,
                headers=self.http.headers,
                timeout=self.http.timeout,
            )
            self._behind_transport = Transport("", "", timeout=0, retry=self.retry, http=http)
            self._behind = Reporter(self._behind_transport.send)
        return self._behind

    async def aclose(self) -> None:
        if self._behind is not None:
            await asyncio.to_thread(self._behind.close)
        if self._behind_transport is not None:
            self._behind_transport.close()
        await self.http.aclose()

    async def _drained(self) -> None:
        if self._behind is not None and self._behind.pending:
            await asyncio.to_thread(self._behind.drain)

    async def send(self, call: Call) -> dict[str, Any]:
        """Send `call` once the confirmations handed over before it are in."""
        await self._drained()
        attempt = 0
        while True:
            attempt += 1
            failure: Failure
            try:
                response = await self.http.request(
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
            await self.sleep(self.retry.delay(attempt))


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"detail": response.text[:500]}


class AsyncLedger:
    """The asyncio twin of `Ledger`; see it for the parameters. Bound to the event loop it is
    first used on, as its `httpx.AsyncClient` is."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        owner: str,
        lease_seconds: int = 30,
        timeout: float = 10.0,
        retries: int = 3,
        http: httpx.AsyncClient | None = None,
        call_timeout: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.call_timeout = call_timeout
        self.sleep = sleep
        retry = Retry(retries=retries)
        self.transport = AsyncTransport(
            base_url, api_key, timeout=timeout, retry=retry, http=http, sleep=sleep
        )

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> AsyncLedger:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> dict[str, Any]:
        return await self.transport.send(call)

    # --- Effects -----------------------------------------------------------------------------

    def effect(
        self,
        run_id: str,
        step_id: str,
        tool: str,
        target: str,
        request: Mapping[str, Any],
        **options: Any,
    ) -> AsyncEffectBlock:
        """`async with ledger.effect(...) as e:`, as `Ledger.effect`."""
        return AsyncEffectBlock(self, run_id, step_id, tool, target, request, options)

    async def record_intent(
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
        return protocol.parse(EffectRecord, await self._send(call))

    async def open(
        self,
        run_id: str,
        step_id: str,
        tool: str,
        target: str,
        request: Mapping[str, Any],
        **options: Any,
    ) -> AsyncEffect:
        name = f"{run_id}:{step_id}"
        sent = time.monotonic()
        try:
            record = await self.record_intent(
                run_id, step_id, tool, target, request, claim=True, **options
            )
        except LedgerRequestError as exc:
            refused = protocol.refusal(name, exc)
            if isinstance(refused, NeedsReview):
                # Claimed by another worker meanwhile: the effect as it stands, to wait on.
                args = (run_id, step_id, tool, target, request)
                refused.effect = await self.record_intent(*args, **options)
            raise refused from exc
        if protocol.opened(name, record) == "replayed":
            return AsyncEffect(self.transport, record, replayed=True)
        heartbeat = TaskHeartbeat(
            self.transport,
            record.id,
            record.lease_token or "",
            record.lease_seconds or self.lease_seconds,
            sent,
        )
        return AsyncEffect(self.transport, record, replayed=False, heartbeat=heartbeat)

    async def claim(self, effect_id: str) -> EffectRecord:
        call = protocol.claim(effect_id, owner=self.owner, lease_seconds=self.lease_seconds)
        try:
            return protocol.parse(EffectRecord, await self._send(call))
        except LedgerRequestError as exc:
            raise protocol.refusal(effect_id, exc, effect_id) from exc

    async def heartbeat(self, effect_id: str, lease_token: str) -> EffectRecord:
        call = protocol.heartbeat(effect_id, lease_token, self.lease_seconds)
        return protocol.parse(EffectRecord, await self._send(call))

    async def end_lease(self, effect_id: str, owner: str) -> EffectRecord:
        call = protocol.end_lease(effect_id, owner)
        return protocol.parse(EffectRecord, await self._send(call))

    async def report(
        self, effect_id: str, lease_token: str, outcome: Mapping[str, Any]
    ) -> EffectRecord:
        call = protocol.outcome(effect_id, {"lease_token": lease_token, **outcome})
        return protocol.parse(EffectRecord, await self._send(call))

    async def cancel(self, effect_id: str, reason: str = "") -> EffectRecord:
        return protocol.parse(EffectRecord, await self._send(protocol.cancel(effect_id, reason)))

    async def compensate(
        self,
        effect_id: str,
        *,
        request: Mapping[str, Any] | None = None,
        tool: str | None = None,
        reason: str = "",
        compensation_key: str | None = None,
    ) -> EffectRecord:
        call = protocol.compensate(
            effect_id,
            tool=tool,
            request=request or {},
            reason=reason,
            compensation_key=compensation_key,
        )
        return protocol.parse(EffectRecord, await self._send(call))

    # --- Reading -----------------------------------------------------------------------------

    async def get(self, effect_id: str) -> EffectRecord:
        return protocol.parse(EffectRecord, await self._send(protocol.get(effect_id)))

    async def list_effects(
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
        return protocol.parse(EffectPage, await self._send(call))

    async def journal(
        self, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> EffectPage:
        call = protocol.journal(run_id, limit=limit, cursor=cursor)
        return protocol.parse(EffectPage, await self._send(call))

    async def iter_journal(self, run_id: str) -> AsyncIterator[EffectRecord]:
        cursor: str | None = None
        while True:
            page = await self.journal(run_id, cursor=cursor)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def recover(
        self, run_id: str | None = None, *, owner: str | None = None, dry_run: bool = False
    ) -> RecoveryPlan:
        """As the sync client's `recover`: every page, most urgent first."""
        pages = [
            protocol.parse(
                RecoveryPlan, await self._send(protocol.recovery(run_id, owner, dry_run))
            )
        ]
        while pages[-1].next_cursor is not None:
            call = protocol.recovery(run_id, owner, dry_run, pages[-1].next_cursor)
            pages.append(protocol.parse(RecoveryPlan, await self._send(call)))
        return protocol.whole_plan(pages)

    async def health(self) -> Health:
        return protocol.parse(Health, await self._send(protocol.health()))

    # --- Waiting -----------------------------------------------------------------------------

    async def wait_for_change(
        self, effect_id: str, *, status: str | None = None, timeout: float = 60.0
    ) -> EffectRecord:
        deadline = time.monotonic() + timeout
        record = await self.get(effect_id)
        known = status if status is not None else record.status
        while record.status == known and (left := deadline - time.monotonic()) >= 1:
            wait = min(protocol.LONG_POLL_MAX, int(left))
            asked = time.monotonic()
            record = protocol.parse(
                EffectRecord, await self._send(protocol.get(effect_id, wait=wait))
            )
            if record.status == known and time.monotonic() - asked < wait - 1:
                pause = min(protocol.LONG_POLL_RETRY, max(0.0, deadline - time.monotonic()))
                await self.sleep(pause)
        return record

    async def wait_for_decision(self, effect_id: str, *, timeout: float = 3600.0) -> EffectRecord:
        return await self.wait_for_change(effect_id, status="awaiting_approval", timeout=timeout)


class AsyncEffectBlock:
    """The async context manager `AsyncLedger.effect` returns."""

    def __init__(
        self,
        ledger: AsyncLedger,
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
        self.effect: AsyncEffect | None = None

    async def __aenter__(self) -> AsyncEffect:
        self.effect = await self.ledger.open(*self.args, **self.options)
        return self.effect

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        effect = self.effect
        if effect is None or effect.replayed:
            return
        try:
            missing = await effect.finish(exc)
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
