"""The three fault drills and the conductor that runs them against private servers.

postgres  PostgreSQL stopped (fast: connections cut) and started again while intent clients
          post: answers are 503 `unavailable` with Retry-After, none hangs or is a traceback;
          every acknowledged intent is stored; afterwards the rq worker checks `unknown`
          effects and the django-q2 cluster runs the sweep and the escalation, none of the
          three (nor gunicorn) having been restarted.
redis     Redis stopped and started again (empty: it keeps nothing on disk) while intent
          clients post and another client leaves effects `unknown`: no agent request fails,
          /health reports Redis down while it is, and the sweep re-drives every wake-up lost
          meanwhile, so each of those effects is checked afterwards.
failover-sync  the primary SIGKILLed under load and a synchronous standby promoted, on clusters
          of its own (`devstack.drills.failover`).
failover-async, restore  the database goes back in time under paying agents, refunds, a halt
          and a revocation: an asynchronous standby promoted, or a base backup restored
          (`devstack.drills.lostwindow`).
web       gunicorn workers SIGKILLed every few seconds and the master itself (then started
          again, as a supervisor would): acknowledged intents are stored, a request that got
          no answer repeated gives 201 or 200 with the stored effect, and the service answers.

The drills share one set of servers and processes, in this order, so a later drill also shows
the processes survived the earlier faults.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import psycopg

from devstack.drills.checks import (
    answer_counts,
    ledger_counts,
    post_unknown,
    replay,
    rq_failed_jobs,
    run_schedules,
    stored_effects,
    wait_confirmed,
)
from devstack.drills.environment import drill_environment
from devstack.drills.failover import failover_sync
from devstack.drills.load import HANG_LIMIT, Api, Call, Intent, Load
from devstack.drills.lostwindow import lost_window
from devstack.drills.report import DrillReport
from devstack.drills.servers import DrillServers
from devstack.drills.services import QCLUSTER, RQ_WORKER, SERVICES, WEB, DrillStack
from devstack.harness import ROOT

DRILLS = ("postgres", "redis", "web", "failover-sync", "failover-async", "restore")
LOST_WINDOW = ("failover-async", "restore")
# Drills on the shared private servers; failover-sync brings clusters of its own.
SHARED = ("postgres", "redis", "web")
SWEEP, ESCALATION = "reconciliation-sweep", "escalation"
HUNG = f"hung > {HANG_LIMIT:.0f} s"
LOGS = ROOT / "var" / "faultdrill"
# How long a direct wake-up may take before we conclude it was lost.
WAKEUP_SECONDS = 10.0


@dataclass
class Size:
    seconds: float = 30.0  # of load
    outage: float = 10.0  # PostgreSQL or Redis down, within the load
    clients: int = 8
    kill_every: float = 2.0  # web: a gunicorn worker SIGKILLed this often
    master_kills: int = 2  # web: and the master, this many times
    recovery_timeout: float = 90.0  # for work after the fault to be done
    probes: int = 3  # `unknown` effects posted after the outage for the rq worker


@dataclass
class Drill:
    servers: DrillServers
    stack: DrillStack
    key: str
    size: Size
    progress: TextIO

    def say(self, message: str) -> None:
        print(f"[faultdrill] {message}", file=self.progress, flush=True)

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.stack.env["DATABASE_URL"], autocommit=True, connect_timeout=5)

    def api(self, calls: list[Call]) -> Api:
        return Api(self.stack.api_url, self.key, calls)


def _under_load(drill: Drill, load: Load, fault: Callable[[], None]) -> float:
    """Start the clients, let them run a while, inflict `fault` (it returns when the fault is
    over), keep the load up for the rest of the drill's time, then drain. Returns how long
    the load lasted, drain included."""
    started = time.monotonic()
    load.start()
    time.sleep(drill.size.seconds * 0.3)
    fault()
    time.sleep(max(0.0, drill.size.seconds - (time.monotonic() - started)))
    drill.say("load stopped; repeating unanswered intents")
    load.stop()
    return round(time.monotonic() - started, 1)


def _common(report: DrillReport, load: Load, conn: psycopg.Connection[Any], prefix: str) -> None:
    """The counts and checks every drill shares: answers, and acknowledged = stored."""
    report.counts.update(answer_counts([c for c in load.calls if c.kind != "health"]))
    report.counts.update(ledger_counts(load.intents, stored_effects(conn, prefix)))
    for name in ("tracebacks", HUNG, "503 without Retry-After", "503 not 'unavailable'", "lost"):
        report.expect_count(name, 0)
    report.expect_count("never acknowledged", 0)
    report.expect_count("refused otherwise", 0)
    report.expect_count("stored, never acknowledged", 0)


def _restarted(drill: Drill, before: dict[str, int], names: Sequence[str]) -> int:
    now = drill.stack.pids()
    return sum(1 for n in names if now[n] != before[n] or not drill.stack.alive(n))


# --- PostgreSQL ----------------------------------------------------------------------------


def _outage(
    drill: Drill,
    name: str,
    stop: Callable[[], None],
    start: Callable[[], None],
    outage: dict[str, float],
) -> Callable[[], None]:
    """A fault that stops a server for the drill's outage and starts it again, noting when it
    was `down` (stopped), `restarting` (about to start) and `back` (started)."""

    def fault() -> None:
        drill.say(f"stopping {name} for {drill.size.outage:.0f} s")
        stop()
        outage["down"] = time.monotonic()
        time.sleep(drill.size.outage)
        outage["restarting"] = time.monotonic()
        start()
        outage["back"] = time.monotonic()
        drill.say(f"{name} is back")

    return fault


def postgres(drill: Drill) -> DrillReport:
    report = DrillReport("postgres")
    before = drill.stack.pids()
    with drill.connect() as conn:
        # A check before the outage, so that the rq worker holds a database connection that
        # the restart cuts, as a worker in service would.
        api = drill.api([])
        warm_id = post_unknown(api, drill.stack.provider.url, "pgbefore")
        warm = wait_confirmed(conn, [warm_id] if warm_id else [], 30)
        api.close()
    report.expect(
        "an unknown effect was checked before the outage", bool(warm) and None not in warm.values()
    )
    report.counts["before: unknown checked by rq"] = _done(warm) if warm else "not posted"
    load = Load(drill.stack.api_url, drill.key, "pg", drill.size.clients)
    outage: dict[str, float] = {}

    fault = _outage(
        drill, "PostgreSQL", drill.servers.stop_postgres, drill.servers.start_postgres, outage
    )

    drill.say(f"postgres: {drill.size.clients} clients for {drill.size.seconds:.0f} s")
    seconds = _under_load(drill, load, fault)
    with drill.connect() as conn:
        report.counts["load s"] = seconds
        _common(report, load, conn, "pg")
        report.counts["database down s"] = round(outage["back"] - outage["down"], 1)
        # A gunicorn thread idle through the outage finds its cut connection only by its next
        # query, which then answers 503: those come after the database is back.
        report.counts["503 once it was back"] = sum(
            1 for c in load.calls if c.status == 503 and c.started >= outage["back"]
        )
        report.expect("no client saw the outage as a 503", report.counts["answered 503"] > 0)
        # gunicorn itself stays up: every request is answered, if only with a 503.
        report.expect_count("no answer", 0)
        report.expect_count("answer lost (502/504)", 0)
        _recovery(drill, report, conn)
    report.counts["processes restarted"] = _restarted(drill, before, SERVICES)
    report.expect_count("processes restarted", 0)
    report.counts["django-q2 processes reincarnated"] = drill.stack.log_count(
        QCLUSTER, "reincarnated"
    )
    return report


def _recovery(drill: Drill, report: DrillReport, conn: psycopg.Connection[Any]) -> None:
    """After the outage, work that needs each process: gunicorn answers intents; the rq worker
    checks `unknown` effects through the provider's lookup; the django-q2 cluster runs its
    schedules."""
    calls: list[Call] = []
    api = drill.api(calls)
    answered = api.call("intent", "POST", "/effects", Intent("pgafter", "s0").body())
    report.counts["after: new intent answered"] = answered.status
    report.expect("gunicorn answers a new intent with 201", answered.status == 201)
    ids = [
        post_unknown(api, drill.stack.provider.url, f"pgafter-{n}")
        for n in range(drill.size.probes)
    ]
    posted = [i for i in ids if i]
    report.expect("the unknown outcomes were recorded", len(posted) == len(ids))
    direct = wait_confirmed(conn, posted, WAKEUP_SECONDS)
    report.counts["after: unknown checked by rq on wake-up"] = _done(direct)
    # Not only eventually, through the sweep: the worker's first jobs after the restart work.
    report.expect("the rq worker checked each on its wake-up", None not in direct.values())
    ran = run_schedules(conn, (SWEEP, ESCALATION), drill.size.recovery_timeout)
    for name, seconds in ran.items():
        report.counts[f"after: django-q2 ran {name} (s)"] = seconds
        report.expect(f"django-q2 ran the {name} schedule", seconds is not None)
    checked = wait_confirmed(conn, posted, drill.size.recovery_timeout)
    report.counts["after: unknown checked by rq in all"] = _done(checked)
    report.expect("the rq worker checked every unknown effect", None not in checked.values())
    report.counts["rq jobs failed"] = rq_failed_jobs(drill.servers.redis_url)
    report.expect_count("rq jobs failed", 0)
    api.close()


def _done(seconds: dict[str, float | None]) -> str:
    return f"{sum(1 for s in seconds.values() if s is not None)}/{len(seconds)}"


# --- Redis ---------------------------------------------------------------------------------


def redis(drill: Drill) -> DrillReport:
    report = DrillReport("redis")
    before = drill.stack.pids()
    load = Load(drill.stack.api_url, drill.key, "rd", drill.size.clients)
    unknowns: list[tuple[str, float, float]] = []  # effect id, first call started, ended

    def leave_unknown(api: Api) -> None:
        started = time.monotonic()
        effect_id = post_unknown(api, drill.stack.provider.url, f"rdunknown-{len(unknowns):05d}")
        if effect_id:
            unknowns.append((effect_id, started, time.monotonic()))

    load.add_loop(ask_health, 0.25)
    load.add_loop(leave_unknown, 0.3)
    outage: dict[str, float] = {}

    fault = _outage(drill, "Redis", drill.servers.stop_redis, drill.servers.start_redis, outage)

    drill.say(f"redis: {drill.size.clients} clients for {drill.size.seconds:.0f} s")
    seconds = _under_load(drill, load, fault)
    with drill.connect() as conn:
        report.counts["load s"] = seconds
        _common(report, load, conn, "rd")
        report.counts["redis down s"] = round(outage["restarting"] - outage["down"], 1)
        agent_calls = [c for c in load.calls if c.kind != "health"]
        report.counts["agent requests failed"] = sum(
            1 for c in agent_calls if c.status not in (200, 201)
        )
        report.expect_count("agent requests failed", 0)
        _health(report, [c for c in load.calls if c.kind == "health"], outage)
        _redrive(drill, report, conn, unknowns, outage)
    report.counts["processes restarted"] = _restarted(drill, before, SERVICES)
    report.expect_count("processes restarted", 0)
    return report


def ask_health(api: Api) -> None:
    api.call("health", "GET", "/health")


def _health(report: DrillReport, health: list[Call], outage: dict[str, float]) -> None:
    during = [c for c in health if c.started >= outage["down"] and c.ended <= outage["restarting"]]
    down = [c for c in during if c.status == 503 and (c.body or {}).get("redis") == "unreachable"]
    after = [c for c in health if c.started >= outage["back"]]
    report.counts["/health during the outage"] = len(during)
    report.counts["/health reporting redis down"] = len(down)
    report.counts["/health after: ok"] = f"{sum(1 for c in after if c.status == 200)}/{len(after)}"
    report.expect("/health was asked during the outage", bool(during))
    report.expect("/health reported Redis down while it was", len(down) == len(during))
    report.expect("/health is ok again after", all(c.status == 200 for c in after))


def _redrive(
    drill: Drill,
    report: DrillReport,
    conn: psycopg.Connection[Any],
    unknowns: list[tuple[str, float, float]],
    outage: dict[str, float],
) -> None:
    """Effects left unknown wholly inside the outage had their wake-up refused by Redis; only
    the sweep can bring them to the rq worker."""
    lost = [
        i
        for i, started, ended in unknowns
        if started >= outage["down"] and ended <= outage["restarting"]
    ]
    report.counts["effects left unknown"] = len(unknowns)
    report.counts["wake-ups lost (unknown during the outage)"] = len(lost)
    report.expect("wake-ups were lost during the outage", bool(lost))
    # A few seconds suffice to show they were lost: a wake-up is checked well within one.
    before_sweep = wait_confirmed(conn, lost, 3)
    report.counts["lost ones checked before the sweep"] = _done(before_sweep)
    ran = run_schedules(conn, (SWEEP,), drill.size.recovery_timeout)
    report.counts["after: django-q2 ran the sweep (s)"] = ran[SWEEP]
    report.expect("django-q2 ran the sweep", ran[SWEEP] is not None)
    checked = wait_confirmed(conn, [i for i, _, _ in unknowns], drill.size.recovery_timeout)
    report.counts["unknown effects checked afterwards"] = _done(checked)
    report.expect("every lost wake-up was re-driven and checked", None not in checked.values())


# --- The web process -----------------------------------------------------------------------


def web(drill: Drill) -> DrillReport:
    report = DrillReport("web")
    before = drill.stack.pids()
    load = Load(drill.stack.api_url, drill.key, "web", drill.size.clients)
    kills: Counter[str] = Counter()
    restarts: list[float] = []
    rng = random.Random(7)

    def fault() -> None:
        end = time.monotonic() + drill.size.seconds * 0.6
        span = end - time.monotonic()
        masters = [
            time.monotonic() + span * (k + 1) / (drill.size.master_kills + 1)
            for k in range(drill.size.master_kills)
        ]
        while time.monotonic() < end:
            if masters and time.monotonic() >= masters[0]:
                masters.pop(0)
                drill.say("SIGKILL the gunicorn master; starting it again")
                drill.stack.kill_web_master()
                kills["master"] += 1
                down = time.monotonic()
                drill.stack.restart_web()
                restarts.append(time.monotonic() - down)
            elif workers := drill.stack.web_workers():
                drill.stack.kill_pid(rng.choice(workers))
                kills["worker"] += 1
            time.sleep(drill.size.kill_every)

    drill.say(f"web: {drill.size.clients} clients for {drill.size.seconds:.0f} s")
    seconds = _under_load(drill, load, fault)
    with drill.connect() as conn:
        report.counts["load s"] = seconds
        _common(report, load, conn, "web")
    report.counts["gunicorn workers SIGKILLed"] = kills["worker"]
    report.counts["gunicorn master SIGKILLed"] = kills["master"]
    report.counts["gunicorn restart s (max)"] = round(max(restarts, default=0.0), 1)
    _unanswered(report, load)
    calls: list[Call] = []
    api = drill.api(calls)
    report.counts.update(replay(api, load.intents))
    report.expect(
        "every repeat is a 200 with the same effect",
        report.counts["repeat: 200, same effect"] == report.counts["repeated after a fault"],
    )
    answered = api.call("intent", "POST", "/effects", Intent("webafter", "s0").body())
    report.counts["after: new intent answered"] = answered.status
    report.expect("the service answers a new intent with 201", answered.status == 201)
    api.close()
    report.counts["rq worker, django-q2 restarted"] = _restarted(
        drill, before, (RQ_WORKER, QCLUSTER)
    )
    report.expect_count("rq worker, django-q2 restarted", 0)
    report.expect("gunicorn is running", drill.stack.alive(WEB))
    return report


def _unanswered(report: DrillReport, load: Load) -> None:
    """The requests the killed processes left without their answer, and what their repeats got.
    Behind nginx a killed worker's requests are answered 502 upstream_lost; a killed master
    may also leave connections without an answer."""
    unanswered = report.counts["no answer"] + report.counts["answer lost (502/504)"]
    report.expect("some request went unanswered", unanswered > 0)
    faulted = [i for i in load.intents if i.unanswered]
    report.counts["intents that got no answer first"] = len(faulted)
    report.counts["  then 200 (it had been stored)"] = sum(1 for i in faulted if i.answer == 200)
    report.counts["  then 201 (it had not)"] = sum(1 for i in faulted if i.answer == 201)


# --- The conductor -------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Drill], DrillReport]] = {
    "postgres": postgres,
    "redis": redis,
    "web": web,
}


def run(names: Sequence[str], size: Size, progress: TextIO = sys.stderr) -> list[DrillReport]:
    """Private PostgreSQL and Redis, a fresh database, the ledger's processes; then each named
    drill, in the order of DRILLS. Everything started is stopped however this ends."""
    LOGS.mkdir(parents=True, exist_ok=True)
    # The processes' logs, kept when a drill fails (the counts say what, the logs why).
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=LOGS))
    reports: list[DrillReport] = []
    if any(name in SHARED for name in names):
        reports += _shared(names, size, workdir, progress)
    if "failover-sync" in names:
        reports.append(failover_sync(workdir, size.seconds, size.clients, progress))
    for name in (n for n in LOST_WINDOW if n in names):
        drill_dir = workdir / name
        drill_dir.mkdir()
        reports.append(lost_window(name, drill_dir, size.seconds, size.clients, progress))
    if all(report.ok for report in reports):
        shutil.rmtree(workdir, ignore_errors=True)
    return reports


def _shared(names: Sequence[str], size: Size, workdir: Path, progress: TextIO) -> list[DrillReport]:
    """The drills on one private PostgreSQL and Redis, in the order of SHARED."""
    reports: list[DrillReport] = []
    with tempfile.TemporaryDirectory(prefix="faultdrill-") as tmp:
        servers = DrillServers(Path(tmp))
        stack: DrillStack | None = None
        try:
            servers.start()
            env = drill_environment(servers.database_url, servers.redis_url)
            stack = DrillStack(workdir, env)
            key = stack.prepare()
            stack.start()
            drill = Drill(servers, stack, key, size, progress)
            drill.say(f"ledger on {stack.api_url}, logs in {workdir}")
            reports = [RUNNERS[name](drill) for name in SHARED if name in names]
        finally:
            if stack is not None:
                stack.stop()
            servers.close()
    return reports
