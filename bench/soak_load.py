"""The soak's agents: HTTP calls of the ledger's agent API from threads, closed-loop to measure
capacity, or at a fixed offered rate, every call's end time, endpoint and latency recorded.

A lifecycle is what an agent does around one side effect: `POST /effects` with `claim: true`,
then `POST /effects/{id}/outcome` (confirmed). Every `RECOVERY_EVERY`-th ticket of an agent is
a `POST /recovery` (`dry_run`) instead, as a restarted worker would ask. Each agent also keeps
`UNFINISHED` planned effects that nobody claims, so `/recovery` always has something to answer
while the agent's finished history grows with every lifecycle.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

RECOVERY_EVERY = 50
UNFINISHED = 30
# Endpoint names in the table.
INTENT, OUTCOME, RECOVERY, METRICS = (
    "POST /effects",
    "POST …/outcome",
    "POST /recovery",
    "GET /metrics",
)
REQUEST = {"amount": "10.00", "currency": "EUR"}


@dataclass
class Calls:
    """Every call as (end, endpoint, latency ms, ok); appended from many threads (a list's
    append is atomic), read once the load has stopped."""

    rows: list[tuple[float, str, float, bool]] = field(default_factory=list)
    lifecycles: list[float] = field(default_factory=list)  # end of each completed lifecycle

    def call(self, http: httpx.Client, name: str, method: str, path: str, **kw) -> dict | None:
        start = time.monotonic()
        try:
            response = http.request(method, path, **kw)
            ok = response.status_code < 400
        except httpx.HTTPError:
            response, ok = None, False
        end = time.monotonic()
        self.rows.append((end, name, (end - start) * 1000, ok))
        return response.json() if ok and response is not None and name != METRICS else None


def client(base_url: str, key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=30.0, trust_env=False)


def lifecycle(calls: Calls, http: httpx.Client, run_id: str) -> None:
    body = {
        "run_id": run_id,
        "step_id": uuid.uuid4().hex,
        "tool": "charge_card",
        "target": "acct_soak",
        "request": REQUEST,
        "claim": True,
        "owner": "soak",
    }
    effect = calls.call(http, INTENT, "POST", "/api/v1/effects", json=body)
    if effect is None:
        return
    outcome = {"lease_token": effect["lease_token"], "status": "confirmed", "provider_ref": "ch"}
    if calls.call(http, OUTCOME, "POST", f"/api/v1/effects/{effect['id']}/outcome", json=outcome):
        calls.lifecycles.append(time.monotonic())


def recovery(calls: Calls, http: httpx.Client) -> None:
    calls.call(http, RECOVERY, "POST", "/api/v1/recovery", json={"dry_run": True})


def seed_unfinished(base_url: str, keys: list[str]) -> None:
    """`UNFINISHED` planned effects per agent, never claimed: what `/recovery` answers."""
    for key in keys:
        with client(base_url, key) as http:
            for n in range(UNFINISHED):
                body = {
                    "run_id": "soak-unfinished",
                    "step_id": f"planned-{n}",
                    "tool": "charge_card",
                    "target": "acct_soak",
                    "request": REQUEST,
                }
                http.post("/api/v1/effects", json=body).raise_for_status()


def closed_loop(base_url: str, keys: list[str], clients: int, seconds: float) -> float:
    """Lifecycles per second with `clients` threads each running them back to back."""
    calls = Calls()
    stop = time.monotonic() + seconds

    def run(index: int) -> None:
        with client(base_url, keys[index % len(keys)]) as http:
            while time.monotonic() < stop:
                lifecycle(calls, http, f"capacity-{index}")

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(calls.lifecycles) / (time.monotonic() - start)


@dataclass
class Offered:
    """A fixed offered rate: ticket k is due at `start + k / rate`, taken by whichever thread is
    free; a thread that is late runs its ticket at once (the queue shows as latency)."""

    rate: float
    start: float
    stop: float
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> int | None:
        with self._lock:
            ticket = self._next
            self._next += 1
        due = self.start + ticket / self.rate
        if due >= self.stop:
            return None
        time.sleep(max(0.0, due - time.monotonic()))
        return ticket


def open_loop(base_url: str, keys: list[str], offered: Offered, threads: int) -> Calls:
    """Tickets at the offered rate until its stop, agent `ticket % len(keys)` each; returns the
    calls. One client per (thread, agent), kept alive."""
    calls = Calls()

    def run(index: int) -> None:
        https = [client(base_url, key) for key in keys]
        try:
            while (ticket := offered.take()) is not None:
                agent, turn = ticket % len(keys), ticket // len(keys)
                if turn % RECOVERY_EVERY == RECOVERY_EVERY - 1:
                    recovery(calls, https[agent])
                else:
                    lifecycle(calls, https[agent], f"soak-{agent}-{turn // 1000}")
        finally:
            for http in https:
                http.close()

    workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return calls


def scrape_every(base_url: str, token: str, seconds: float, stop: float, calls: Calls) -> None:
    """GET /metrics every `seconds` until `stop`, as a Prometheus would."""
    with client(base_url, token) as http:
        while time.monotonic() < stop:
            calls.call(http, METRICS, "GET", "/metrics")
            time.sleep(max(0.0, min(seconds, stop - time.monotonic())))
