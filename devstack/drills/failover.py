"""The failover drill: the primary dies under load and a synchronous standby takes over.

failover-sync  The ledger runs on a primary with a synchronous streaming standby (both on
               loopback, `devstack.drills.replica`), `DATABASE_URL` naming both hosts with
               `target_session_attrs=read-write`. Clients run whole effects: an intent, a claim
               (with a claim_id, so a repeat is the same claim) and a confirmed outcome, each
               repeated after a 503 or no answer until acknowledged. Mid-load the primary's
               postmaster is SIGKILLed, the old primary fenced (standby.signal), and the standby
               promoted with `pg_ctl promote`. The rule: no acknowledged write lost (each
               acknowledged intent stored, each acknowledged claim and outcome there), nothing
               but clean 503s with Retry-After while it switches, and no process restarted.

It prints, last, `drill failover-sync: acknowledged N, lost L, duplicates D, unaccounted U`:
N acknowledged writes (intents, claims, outcomes), L of them missing on the new primary, D
effects stored twice for one step, U effects stored that no client was ever told of.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psycopg

from devstack.drills.checks import answer_counts
from devstack.drills.environment import drill_environment
from devstack.drills.load import HANG_LIMIT, Api, Call, Intent, pause_after, settle
from devstack.drills.replica import ReplicaPair
from devstack.drills.report import DrillReport
from devstack.drills.servers import RestartableRedis
from devstack.drills.services import SERVICES, DrillStack

PREFIX = "fo"
HUNG = f"hung > {HANG_LIMIT:.0f} s"


@dataclass
class Effect:
    """One client's effect and how far the ledger acknowledged it."""

    intent: Intent
    claimed: bool = False
    confirmed: bool = False
    token: str = ""


def _until_answered(
    api: Api, kind: str, path: str, body: dict[str, Any], give_up_at: Callable[[], float]
) -> Call | None:
    """POST until a non-503 answer arrives (None when time ran out)."""
    while time.monotonic() < give_up_at():
        call = api.call(kind, "POST", path, body)
        if call.status is not None and call.status != 503:
            return call
        time.sleep(pause_after(call))
    return None


def _lifecycle(api: Api, effect: Effect, give_up_at: Callable[[], float]) -> None:
    settle(api, effect.intent, give_up_at)
    if not effect.intent.effect_id:
        return
    base = f"/effects/{effect.intent.effect_id}"
    claim_id = f"{effect.intent.run_id}-{effect.intent.step_id}"
    claimed = _until_answered(
        api, "claim", f"{base}/claim", {"owner": "drill", "claim_id": claim_id}, give_up_at
    )
    if claimed is None or claimed.status != 200 or not claimed.body:
        return
    effect.claimed, effect.token = True, str(claimed.body.get("lease_token") or "")
    outcome = {"lease_token": effect.token, "status": "confirmed", "provider_ref": claim_id}
    reported = _until_answered(api, "outcome", f"{base}/outcome", outcome, give_up_at)
    effect.confirmed = reported is not None and reported.status == 200


@dataclass
class LifecycleLoad:
    api_url: str
    key: str
    clients: int
    calls: list[Call] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    give_up_at: float = float("inf")

    def _client(self, n: int) -> None:
        api = Api(self.api_url, self.key, self.calls)
        i = 0
        while not self.stopping.is_set():
            effect = Effect(Intent(f"{PREFIX}-c{n}", f"s{i:06d}"))
            self.effects.append(effect)
            _lifecycle(api, effect, lambda: self.give_up_at)
            i += 1
        api.close()

    def run(self, seconds: float, fault: Callable[[], None]) -> None:
        threads = [
            threading.Thread(target=self._client, args=(n,), daemon=True)
            for n in range(self.clients)
        ]
        for thread in threads:
            thread.start()
        time.sleep(seconds * 0.3)
        fault()
        time.sleep(seconds * 0.7)
        self.give_up_at = time.monotonic() + 60
        self.stopping.set()
        for thread in threads:
            thread.join(90)


def _kill_primary(pair: ReplicaPair) -> None:
    """SIGKILL the primary's postmaster (its backends notice and exit), then fence it."""
    pid = int((pair.primary.pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pair.primary.is_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    (pair.primary.pgdata / "standby.signal").touch()


def _ledger_state(conn: psycopg.Connection[Any]) -> dict[tuple[str, str], list[tuple]]:
    rows = conn.execute(
        "SELECT run_id, step_id, id::text, status, attempt FROM ledger_effect WHERE run_id LIKE %s",
        [f"{PREFIX}-%"],
    ).fetchall()
    found: dict[tuple[str, str], list[tuple]] = {}
    for run_id, step_id, effect_id, status, attempt in rows:
        found.setdefault((run_id, step_id), []).append((effect_id, status, attempt))
    return found


def _score(report: DrillReport, load: LifecycleLoad, stored: dict) -> None:
    acked = [e for e in load.effects if e.intent.effect_id]
    lost = {"intent": 0, "claim": 0, "outcome": 0}
    for effect in acked:
        rows = stored.get((effect.intent.run_id, effect.intent.step_id), [])
        row = next((r for r in rows if r[0] == effect.intent.effect_id), None)
        if row is None:
            lost["intent"] += 1
            continue
        _, status, attempt = row
        if effect.claimed and (status == "planned" or attempt < 1):
            lost["claim"] += 1
        if effect.confirmed and status != "confirmed":
            lost["outcome"] += 1
    told = {(e.intent.run_id, e.intent.step_id) for e in acked}
    report.counts.update(answer_counts(load.calls))
    report.counts.update(
        {
            "acknowledged intents": len(acked),
            "acknowledged claims": sum(e.claimed for e in acked),
            "acknowledged outcomes": sum(e.confirmed for e in acked),
            "lost intents": lost["intent"],
            "lost claims": lost["claim"],
            "lost outcomes": lost["outcome"],
            "duplicates": sum(1 for rows in stored.values() if len(rows) > 1),
            "unaccounted": sum(1 for key in stored if key not in told),
        }
    )
    for name in ("lost intents", "lost claims", "lost outcomes", "duplicates", "unaccounted"):
        report.expect_count(name, 0)
    for name in ("tracebacks", HUNG, "503 without Retry-After", "503 not 'unavailable'"):
        report.expect_count(name, 0)
    report.expect("the clients saw the switch", report.counts["answered 503"] > 0)


def summary_line(report: DrillReport) -> str:
    c = report.counts
    acknowledged = sum(c.get(f"acknowledged {k}", 0) for k in ("intents", "claims", "outcomes"))
    lost = sum(c.get(f"lost {k}", 0) for k in ("intents", "claims", "outcomes"))
    return (
        f"drill {report.drill}: acknowledged {acknowledged}, lost {lost}, "
        f"duplicates {c.get('duplicates', 0)}, unaccounted {c.get('unaccounted', 0)}"
    )


def failover_sync(workdir: Path, seconds: float, clients: int, progress: TextIO) -> DrillReport:
    """Run the drill on clusters and processes of its own; everything is stopped at the end."""
    report = DrillReport("failover-sync")

    def say(message: str) -> None:
        print(f"[faultdrill] {message}", file=progress, flush=True)

    pair = ReplicaPair()
    redis = RestartableRedis(Path(tempfile.mkdtemp(prefix="failover-redis-", dir=workdir)))
    stack: DrillStack | None = None
    try:
        pair.start_primary()
        pair.make_synchronous()
        pair.clone_standby()
        pair.start_standby()
        pair.wait_streaming()
        env = drill_environment(pair.multi_host_url("postgres"), redis.start())
        stack = DrillStack(workdir, env)
        key = stack.prepare()
        stack.start()
        before = stack.pids()
        say(f"failover-sync: {clients} clients for {seconds:.0f} s; primary killed at 30 %")
        load = LifecycleLoad(stack.api_url, key, clients)

        def fault() -> None:
            _kill_primary(pair)
            say("primary killed and fenced; promoting the standby")
            pair.promote_standby()
            say("standby promoted")

        load.run(seconds, fault)
        with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
            _score(report, load, _ledger_state(conn))
        now = stack.pids()
        report.counts["processes restarted"] = sum(
            1 for name in SERVICES if now[name] != before[name] or not stack.alive(name)
        )
        report.expect_count("processes restarted", 0)
    finally:
        if stack is not None:
            stack.stop()
        redis.stop()
        pair.close()
    return report
