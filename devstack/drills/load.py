"""The drills' clients: agents speaking only HTTP, every call recorded with its timing and
what it answered.

An intent client posts intents one after another, each with a run_id/step_id of its own, and
repeats the same request until it is answered: after a 503 it waits what `Retry-After` says
(as the API asks), after no answer at all, or an answer lost behind the front server (502
`upstream_lost`, 504 `upstream_timeout`: the request may have taken effect), a moment. So
every intent ends acknowledged (201, or 200 when an earlier attempt had stored it) unless the
drill's drain time runs out.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

# Longer than the hang limit the drills assert (5 s), so a hang is measured, not cut short.
REQUEST_TIMEOUT = 10.0
HANG_LIMIT = 5.0
MAX_RETRY_AFTER = 5.0  # never believe a Retry-After longer than this
NO_ANSWER_PAUSE = 0.2
DRAIN_SECONDS = 60.0  # how long clients keep repeating unanswered intents after the load
# The front server's own answers when gunicorn broke off after the request reached it, or did
# not answer in time: the application's answer was lost, as with no answer at all.
LOST_ANSWERS = {502: "upstream_lost", 504: "upstream_timeout"}


@dataclass
class Call:
    kind: str  # "intent", "health", "claim", "outcome", ...
    started: float  # time.monotonic()
    seconds: float
    status: int | None  # None: no answer (refused, reset, timed out)
    retry_after: str | None
    error: str  # the body's `error`, or the transport error's class
    traceback: bool  # a 5xx other than 503 or a lost answer, a body not JSON, or a traceback
    body: dict[str, Any] | None

    @property
    def ended(self) -> float:
        return self.started + self.seconds

    @property
    def answer_lost(self) -> bool:
        """No answer, or the front server's word that the application's answer was lost."""
        return self.status is None or LOST_ANSWERS.get(self.status) == self.error


@dataclass
class Intent:
    run_id: str
    step_id: str
    effect_id: str | None = None  # from the answer that acknowledged it
    answer: int | None = None  # 201 (new) or 200 (an earlier attempt had stored it)
    unanswered: int = 0  # attempts before that got no answer, or a lost one (502/504)
    refused: int = 0  # attempts before that got 503
    other: int | None = None  # a status that is neither, which ends the attempts

    def body(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "step_id": self.step_id,
            "tool": "charge_card",
            "target": f"acct_{self.run_id}",
            "request": {"amount": "10.00", "currency": "EUR"},
        }


def _is_traceback(status: int, error: str, text: str, content_type: str) -> bool:
    if status >= 500 and status != 503 and LOST_ANSWERS.get(status) != error:
        return True
    if "Traceback (most recent call last)" in text:
        return True
    return not content_type.startswith("application/json")


class Api:
    """The agent API over HTTP; every call is appended to `calls` (list.append is atomic)."""

    def __init__(self, api_url: str, key: str, calls: list[Call]) -> None:
        self.calls = calls
        self.http = httpx.Client(
            base_url=api_url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=REQUEST_TIMEOUT,
            trust_env=False,
        )

    def call(self, kind: str, method: str, path: str, body: Any = None) -> Call:
        started = time.monotonic()
        try:
            response = self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            call = Call(kind, started, time.monotonic() - started, None, None,
                        type(exc).__name__, False, None)  # fmt: skip
        else:
            data: dict[str, Any] | None = None
            with contextlib.suppress(ValueError):
                parsed = json.loads(response.text)
                data = parsed if isinstance(parsed, dict) else None
            error = str((data or {}).get("error") or "")
            call = Call(
                kind,
                started,
                time.monotonic() - started,
                response.status_code,
                response.headers.get("Retry-After"),
                error,
                _is_traceback(
                    response.status_code,
                    error,
                    response.text,
                    response.headers.get("content-type", ""),
                ),
                data,
            )
        self.calls.append(call)
        return call

    def close(self) -> None:
        self.http.close()


def pause_after(call: Call) -> float:
    """How long to wait before repeating a request that was not acknowledged."""
    if call.answer_lost:
        return NO_ANSWER_PAUSE
    try:
        return min(max(float(call.retry_after or 1), 0.0), MAX_RETRY_AFTER)
    except ValueError:
        return 1.0


def settle(api: Api, intent: Intent, give_up_at: Callable[[], float]) -> None:
    """Post `intent` until it is acknowledged (or refused for good, or time is up)."""
    while time.monotonic() < give_up_at():
        call = api.call("intent", "POST", "/effects", intent.body())
        if call.status in (200, 201) and call.body:
            intent.answer, intent.effect_id = call.status, str(call.body.get("id"))
            return
        if call.answer_lost:
            intent.unanswered += 1
        elif call.status == 503:
            intent.refused += 1
        else:
            intent.other = call.status
            return
        time.sleep(pause_after(call))


class Load:
    """`clients` intent clients, each a thread, plus any extra loops the drill adds."""

    def __init__(self, api_url: str, key: str, prefix: str, clients: int) -> None:
        self.api_url, self.key, self.prefix = api_url, key, prefix
        self.calls: list[Call] = []
        self.intents: list[Intent] = []
        self.stopping = threading.Event()
        self.give_up_at = float("inf")
        self.threads = [
            threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(clients)
        ]

    def api(self) -> Api:
        return Api(self.api_url, self.key, self.calls)

    def add_loop(self, step: Callable[[Api], None], every: float) -> None:
        """Run `step` every `every` seconds until the load stops."""

        def loop() -> None:
            api = self.api()
            while not self.stopping.is_set():
                step(api)
                self.stopping.wait(every)
            api.close()

        self.threads.append(threading.Thread(target=loop, daemon=True))

    def _client(self, n: int) -> None:
        api = self.api()
        i = 0
        while not self.stopping.is_set():
            intent = Intent(f"{self.prefix}-c{n}", f"s{i:06d}")
            self.intents.append(intent)
            settle(api, intent, lambda: self.give_up_at)
            i += 1
        api.close()

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        """No new intents; unanswered ones are repeated for up to DRAIN_SECONDS."""
        self.give_up_at = time.monotonic() + DRAIN_SECONDS
        self.stopping.set()
        for thread in self.threads:
            thread.join(DRAIN_SECONDS + REQUEST_TIMEOUT + 5)
